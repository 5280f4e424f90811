package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
)

// TestCommandsBindCodeExecs: a non-empty commands allowlist applies to
// code execs too, by the interpreter's command line (the security review's
// F5 ran any shell code past `commands` when `languages` was unset).
func TestCommandsBindCodeExecs(t *testing.T) {
	sup, _, _ := guardFixture(t, `commands = ["python3 *.py", "ls **", "echo **"]`)
	ctx := context.Background()
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var denied *policy.Denied
	for _, r := range []ExecRequest{
		{Argv: []string{"pwd"}},
		{Code: "pwd; id -u; uname -a", Language: "sh"},
		{Code: "pwd", Language: "bash"},
		{Code: "import os; os.system('pwd')", Language: "python"},
	} {
		// (The fake driver runs what it does not know as sleep: a command
		// that was let through ends with the context.)
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := sup.Exec(rctx, alice, in.ID, r)
		cancel()
		if !errors.As(err, &denied) || denied.Decision.Rule != "commands" {
			t.Errorf("%+v outside the commands allowlist: %v", r, err)
		}
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo", "allowed"}}); err != nil {
		t.Errorf("an allowed command: %v", err)
	}
}
