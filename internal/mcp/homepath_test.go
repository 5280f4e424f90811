package mcp_test

import (
	"context"
	"path"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/policy"
	_ "github.com/airlock-sandbox/airlock/internal/policy/celrules"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestHomePathsAreWorkspacePaths: through MCP's write_file and
// run_command, in a sandbox whose template has E2B's home, a rule on
// /workspace/secret holds for every way of naming it
// (sandboxtest.HomePaths), a workspace-only rule lets the home and
// /workspace be written (write_file made an existing parent directory,
// /workspace itself, which that rule refused), and a rule on commands run in /workspace holds for a cwd of
// /home/user.
func TestHomePathsAreWorkspacePaths(t *testing.T) {
	pol, err := policy.New(policy.File{Rules: []policy.Rule{
		{Name: "outside", When: `action == "file_write" && !(path.startsWith("/workspace/") || path.startsWith("/tmp/"))`, Decision: policy.Deny, Reason: "write under /workspace"},
		{Name: "secret", When: `action == "file_write" && (path == "/workspace/secret" || path.startsWith("/workspace/secret/"))`, Decision: policy.Deny, Reason: "not the secret"},
		{Name: "at-home", When: `action == "exec" && path == "/workspace" && argv.exists(a, a == "athome")`, Decision: policy.Deny, Reason: "not at home"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Policy: pol,
		Config:       supervisor.Config{Templates: []supervisor.Template{{Name: "default", Home: sandbox.E2BHome}}},
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close(context.Background()); st.Close() })
	cs := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}))
	for _, hp := range sandboxtest.HomePaths {
		if hp.Home != sandbox.E2BHome || hp.Path == "" || strings.Contains(hp.Path, "..") {
			continue
		}
		want := ""
		switch {
		case hp.Want == "/workspace/secret" || strings.HasPrefix(hp.Want, "/workspace/secret/"):
			want = "rule:secret"
		case !strings.HasPrefix(hp.Want, "/workspace/") && !strings.HasPrefix(hp.Want, "/tmp/"):
			want = "rule:outside"
		}
		_, text, _ := call(t, cs, "write_file", map[string]any{"path": hp.Path, "content": "x"})
		denied := strings.Contains(text, "denied by policy")
		switch {
		case strings.HasSuffix(text, "is a directory"):
			// The home itself: refused before the policy.
		case want == "" && denied:
			t.Errorf("write_file %q (judged as %s): %s; want it allowed", hp.Path, hp.Want, text)
		case want != "" && !strings.Contains(text, "denied by policy ("+want+")"):
			t.Errorf("write_file %q (judged as %s): %s; want denied by %s", hp.Path, hp.Want, text, want)
		}
		if path.IsAbs(hp.Path) && hp.Want == "/workspace" {
			if _, text, _ := call(t, cs, "run_command", map[string]any{"command": "true", "args": []string{"athome"}, "cwd": hp.Path}); !strings.Contains(text, "rule:at-home") {
				t.Errorf("run_command in %q: %s; want denied by rule:at-home", hp.Path, text)
			}
		}
	}
}
