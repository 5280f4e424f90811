package e2b

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestHomePathsAreWorkspacePaths: through E2B's filesystem and process
// services, a policy's rules on /workspace hold for the names of the same
// files under /home/user (sandboxtest.HomePaths): a workspace-only rule
// lets the home be written, a rule on /workspace/secret refuses
// /home/user/secret, and a rule on commands run in /workspace holds for a
// cwd of /home/user, and for none (commands start in the home).
func TestHomePathsAreWorkspacePaths(t *testing.T) {
	pol, err := policy.New(policy.File{Rules: []policy.Rule{
		{Name: "outside", When: `action == "file_write" && !(path.startsWith("/workspace/") || path.startsWith("/tmp/"))`, Decision: policy.Deny, Reason: "write under /workspace"},
		{Name: "at-home", When: `action == "exec" && path == "/workspace" && argv.exists(a, a == "athome")`, Decision: policy.Deny, Reason: "not at home"},
		{Name: "secret", When: `action in ["file_write", "exec"] && (path == "/workspace/secret" || path.startsWith("/workspace/secret/"))`, Decision: policy.Deny, Reason: "not the secret"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Config: cfg, Policy: pol}, nil)
	sb := e.create(e.key, `{}`)
	msgs, _ := e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"true","args":["athome"]}}`, nil)
	if len(msgs) != 3 || !strings.Contains(string(msgs[2]), "denied by policy (rule:at-home)") {
		t.Errorf("Start without a cwd: %s; want denied by rule:at-home", msgs)
	}
	for _, c := range sandboxtest.HomePaths {
		if c.Home != sandbox.E2BHome || c.Path == "" || strings.Contains(c.Path, "..") {
			continue // E2B's surface refuses ".." before the policy
		}
		want := ""
		switch {
		case c.Want == "/workspace/secret" || strings.HasPrefix(c.Want, "/workspace/secret/"):
			want = "rule:secret"
		case !strings.HasPrefix(c.Want, "/workspace/") && !strings.HasPrefix(c.Want, "/tmp/"):
			want = "rule:outside"
		}
		p, _ := json.Marshal(c.Path)
		st, b := e.rpc(sb, "/filesystem.Filesystem/MakeDir", `{"path":`+string(p)+`}`)
		denied := strings.Contains(string(b), "denied by policy")
		switch {
		case want == "" && denied:
			t.Errorf("MakeDir %q (judged as %s): %d %s; want it allowed", c.Path, c.Want, st, b)
		case want != "" && st != 409 && !strings.Contains(string(b), "denied by policy ("+want+")"):
			// (409: an existing directory, the home, is answered first.)
			t.Errorf("MakeDir %q (judged as %s): %d %s; want denied by %s", c.Path, c.Want, st, b, want)
		}
		if !path.IsAbs(c.Path) || c.Want != "/workspace" {
			continue // (a cwd that does not exist is refused before the policy)
		}
		msgs, _ := e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"true","args":["athome"],"cwd":`+string(p)+`}}`, nil)
		if len(msgs) != 3 || !strings.Contains(string(msgs[2]), "denied by policy (rule:at-home)") {
			t.Errorf("Start in cwd %q (judged as %s): %s; want denied by rule:at-home", c.Path, c.Want, msgs)
		}
	}
}
