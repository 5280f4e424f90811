package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
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

// TestExecTimeoutBound: an exec may not ask for a longer timeout than its
// sandbox has (which create checked against the template and the policy's
// ceiling), and the policy sees each exec's timeout (the security review's
// F7 ran an 8 s exec in a sandbox whose template and ceiling said 3 s).
func TestExecTimeoutBound(t *testing.T) {
	sup, _, _ := guardFixture(t, `
[ceilings]
timeout = "3s"

[[rule]]
name = "short-execs"
when = 'action == "exec" && limits.timeout_seconds > 2.0'
decision = "deny"
reason = "execs here get at most 2 s"
`)
	ctx := context.Background()
	if _, err := sup.Create(ctx, alice, CreateRequest{}); !errors.Is(err, policy.ErrDenied) {
		t.Fatalf("a create with the template's 10 s timeout past a 3 s ceiling: %v", err)
	}
	in, err := sup.Create(ctx, alice, CreateRequest{Limits: sandbox.Limits{Timeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo"}, Timeout: 8 * time.Second})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "3s") {
		t.Fatalf("an 8 s exec in a 3 s sandbox: %v", err)
	}
	_, err = sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"echo"}, Timeout: 8 * time.Second}})
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("an 8 s background process in a 3 s sandbox: %v", err)
	}
	// The sandbox's own 3 s, and an asked 2.5 s, are seen by the rule.
	var denied *policy.Denied
	for _, d := range []time.Duration{0, 2500 * time.Millisecond} {
		if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo"}, Timeout: d}); !errors.As(err, &denied) || denied.Decision.Rule != "rule:short-execs" {
			t.Fatalf("exec with timeout %v: the rule on limits.timeout_seconds did not see it: %v", d, err)
		}
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo"}, Timeout: 2 * time.Second}); err != nil {
		t.Fatalf("a 2 s exec: %v", err)
	}
}

// TestPendingApprovalsCap: one key may have at most MaxPendingPerKey
// actions waiting for a person; more are refused at once (the security
// review's F9 parked 300 from one key, hiding one among decoys).
func TestPendingApprovalsCap(t *testing.T) {
	sup, _, _ := guardFixture(t, guardPolicy)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := Caller{KeyID: "key-flood", Rate: store.RateLimits{MaxInFlight: 100}}
	in, err := sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 30)
	for i := 0; i < 30; i++ {
		go func() {
			_, err := sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"echo", "please"}})
			errs <- err
		}()
	}
	limited := 0
	for deadline := time.After(5 * time.Second); limited < 30-MaxPendingPerKey; {
		select {
		case err := <-errs:
			var re *RateError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "waiting for approval") {
				t.Fatalf("an exec past the pending cap: %v", err)
			}
			limited++
		case <-deadline:
			t.Fatalf("%d execs refused; want %d of 30 past the cap of %d pending approvals", limited, 30-MaxPendingPerKey, MaxPendingPerKey)
		}
	}
	list, _ := sup.Approvals(ctx, operator)
	if len(list) != MaxPendingPerKey {
		t.Fatalf("%d approvals listed, want %d", len(list), MaxPendingPerKey)
	}
}
