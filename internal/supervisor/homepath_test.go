package supervisor

import (
	"context"
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// TestHomePathsAreWorkspacePaths: in a sandbox with E2B's home, a rule on
// /workspace holds for the home's name of the same files, whatever way a
// caller writes it (sandboxtest.HomePaths), for file writes and an exec's
// directory. Before live.request wrote paths as sandbox.PolicyPath, a
// write to /home/user/data/x was refused by a workspace-only rule and one
// to /home/user/secret passed the rule on /workspace/secret.
func TestHomePathsAreWorkspacePaths(t *testing.T) {
	sup, _, _ := guardFixture(t, `
[[rule]]
name = "outside"
when = 'action == "file_write" && !(path.startsWith("/workspace/") || path.startsWith("/tmp/"))'
decision = "deny"
reason = "write under /workspace or /tmp"

[[rule]]
name = "secret"
when = 'action in ["file_write", "exec"] && (path == "/workspace/secret" || path.startsWith("/workspace/secret/"))'
decision = "deny"
reason = "not the secret"

[[rule]]
name = "home"
when = 'action == "exec" && code == "in the home" && path == "/workspace"'
decision = "deny"
reason = "a cell's path is its directory"
`)
	ctx := context.Background()
	info, err := sup.Create(ctx, alice, CreateRequest{Home: sandbox.E2BHome})
	if err != nil {
		t.Fatal(err)
	}
	files, done, err := sup.Files(ctx, alice, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, c := range sandboxtest.HomePaths {
		if c.Home != sandbox.E2BHome || c.Path == "" {
			continue
		}
		want := ""
		switch {
		case c.Want == "/workspace/secret" || strings.HasPrefix(c.Want, "/workspace/secret/"):
			want = "rule:secret"
		case !strings.HasPrefix(c.Want, "/workspace/") && !strings.HasPrefix(c.Want, "/tmp/"):
			want = "rule:outside"
		}
		err := files.Mkdir(ctx, c.Path, 0o755)
		var denied *policy.Denied
		switch {
		case want == "" && errors.As(err, &denied):
			t.Errorf("mkdir %q (judged as %s): %v; want it allowed", c.Path, c.Want, err)
		case want != "" && !errors.As(err, &denied):
			t.Errorf("mkdir %q (judged as %s): %v; want denied by %s", c.Path, c.Want, err, want)
		case want != "" && path.IsAbs(c.Path) && denied.Decision.Rule != want:
			// (The fake resolves a relative path from /workspace, not
			// from the home as the agent does, and its judgement of that
			// may deny first.)
			t.Errorf("mkdir %q (judged as %s): %v; want denied by %s", c.Path, c.Want, err, want)
		}
		if !path.IsAbs(c.Path) {
			continue // an exec's directory is absolute
		}
		_, err = sup.Exec(ctx, alice, info.ID, ExecRequest{Argv: []string{"true"}, Dir: c.Path})
		denied = nil
		switch execWant := want == "rule:secret"; {
		case !execWant && errors.As(err, &denied):
			t.Errorf("exec in %q (judged as %s): %v; want it allowed", c.Path, c.Want, err)
		case execWant && (!errors.As(err, &denied) || denied.Decision.Rule != want):
			t.Errorf("exec in %q (judged as %s): %v; want denied by %s", c.Path, c.Want, err, want)
		}
		// A code interpreter's cell (E2B's runCode) is judged in its
		// kernel's working directory as an exec is in its own.
		_, end, err := sup.Cell(ctx, alice, info.ID, "python", "1", c.Path, time.Minute)
		denied = nil
		if err == nil {
			end(sandbox.Result{}, "", "")
		}
		switch cellWant := want == "rule:secret"; {
		case !cellWant && errors.As(err, &denied):
			t.Errorf("cell in %q (judged as %s): %v; want it allowed", c.Path, c.Want, err)
		case cellWant && (!errors.As(err, &denied) || denied.Decision.Rule != want):
			t.Errorf("cell in %q (judged as %s): %v; want denied by %s", c.Path, c.Want, err, want)
		}
	}
	// A cell with no directory runs in the home, which is what the policy
	// sees.
	var denied *policy.Denied
	if _, _, err := sup.Cell(ctx, alice, info.ID, "python", "in the home", "", time.Minute); !errors.As(err, &denied) || denied.Decision.Rule != "rule:home" {
		t.Errorf("a cell with no directory: %v; want denied by rule:home (its path the home)", err)
	}
	// The write the workspace-only rule is for lands, under either name.
	if err := files.WriteFile(ctx, "/home/user/data.txt", strings.NewReader("x"), 0o644); err != nil {
		t.Errorf("write /home/user/data.txt: %v", err)
	}
}
