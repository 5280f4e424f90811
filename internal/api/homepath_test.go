package api

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestHomePathsAreWorkspacePaths: through airlock's own file API and
// exec, in a sandbox whose template has E2B's home, a rule on
// /workspace/secret holds for every way of naming it
// (sandboxtest.HomePaths), and a workspace-only rule lets the home be
// written.
func TestHomePathsAreWorkspacePaths(t *testing.T) {
	pol, err := policy.New(policy.File{Rules: []policy.Rule{
		{Name: "outside", When: `action == "file_write" && !(path.startsWith("/workspace/") || path.startsWith("/tmp/"))`, Decision: policy.Deny, Reason: "write under /workspace"},
		{Name: "secret", When: `action in ["file_write", "exec"] && (path == "/workspace/secret" || path.startsWith("/workspace/secret/"))`, Decision: policy.Deny, Reason: "not the secret"},
		{Name: "at-home", When: `action == "exec" && path == "/workspace" && argv.exists(a, a == "athome")`, Decision: policy.Deny, Reason: "not at home"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, &fake.Driver{}, envOptions{cfg: supervisor.Config{Templates: []supervisor.Template{{Name: "default", Home: sandbox.E2BHome}}}, pol: pol})
	c := e.agent()
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	for _, hp := range sandboxtest.HomePaths {
		if hp.Home != sandbox.E2BHome || hp.Path == "" || strings.Contains(hp.Path, "..") {
			continue // the API refuses ".." before the policy
		}
		want := ""
		switch {
		case hp.Want == "/workspace/secret" || strings.HasPrefix(hp.Want, "/workspace/secret/"):
			want = "rule:secret"
		case !strings.HasPrefix(hp.Want, "/workspace/") && !strings.HasPrefix(hp.Want, "/tmp/"):
			want = "rule:outside"
		}
		err := c.WriteFile(ctx, sb.ID, hp.Path, strings.NewReader("x"), 0o644)
		denied := errors.As(err, &ce) && ce.Status == 403
		switch {
		case want == "" && denied:
			t.Errorf("write %q (judged as %s): %v; want it allowed", hp.Path, hp.Want, err)
		case want != "" && (!denied || !strings.Contains(ce.Message, want)):
			t.Errorf("write %q (judged as %s): %v; want denied by %s", hp.Path, hp.Want, err, want)
		}
		if !path.IsAbs(hp.Path) || hp.Want != "/workspace" {
			continue // (a cwd is absolute)
		}
		_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true", "athome"}, Cwd: hp.Path})
		if !errors.As(err, &ce) || ce.Status != 403 || !strings.Contains(ce.Message, "rule:at-home") {
			t.Errorf("exec in %q: %v; want denied by rule:at-home", hp.Path, err)
		}
	}
	// Without a cwd a command starts in the home: /workspace to the policy.
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true", "athome"}}); !errors.As(err, &ce) || !strings.Contains(ce.Message, "rule:at-home") {
		t.Errorf("exec without a cwd: %v; want denied by rule:at-home", err)
	}
}
