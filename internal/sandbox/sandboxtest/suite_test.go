package sandboxtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// childEnv makes TestSuiteRefuses run the suite itself, in the way its
// value names, instead of checking how a run of it ends.
const childEnv = "AIRLOCK_SANDBOXTEST_CHILD"

// noShell is the fake driver declaring no shell and no background execs.
type noShell struct{ *fake.Driver }

func (noShell) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{Files: true} }

// printOnly is a workload for the fake driver: its "echo" prints its
// arguments. Nothing else of it is meant to run.
type printOnly struct{ sandboxtest.Workload }

func (printOnly) Print(stdout, _ string, _ int) sandbox.ExecRequest {
	return sandbox.ExecRequest{Argv: []string{"echo", strings.TrimSuffix(stdout, "\n")}}
}

// childRun runs the suite against the fake driver as mode says.
func childRun(t *testing.T, mode string) {
	newFake := func(*testing.T) sandbox.Driver { return &fake.Driver{} }
	newNoShell := func(*testing.T) sandbox.Driver { return noShell{&fake.Driver{}} }
	switch mode {
	case "fake":
		sandboxtest.Run(t, newFake, sandboxtest.Options{})
	case "declared":
		sandboxtest.Run(t, newFake, sandboxtest.Options{Unsupported: map[string]string{
			"egress/allow_and_refuse": "the fake has no egress",
			"mounts/read_only":        "the fake shows no host paths",
		}})
	case "unknown_name":
		sandboxtest.Run(t, newFake, sandboxtest.Options{Unsupported: map[string]string{"exec/no_such_case": "whatever"}})
	case "no_shell":
		sandboxtest.Run(t, newNoShell, sandboxtest.Options{})
	case "no_shell_workload":
		sandboxtest.Run(t, newNoShell, sandboxtest.Options{Workload: printOnly{}})
	default:
		t.Fatalf("no such mode %q", mode)
	}
}

// TestSuiteRefuses checks how the suite treats a driver that lacks what a
// case needs: the case fails unless the driver declares it, with a reason
// the skip shows. Each run is a child process (this test binary, running
// the suite against the fake driver), so that its failures can be looked at
// rather than failing this test.
func TestSuiteRefuses(t *testing.T) {
	if mode := os.Getenv(childEnv); mode != "" {
		childRun(t, mode)
		return
	}
	for _, tt := range []struct {
		name, mode, run string
		fails           bool
		want            []string
	}{
		{name: "undeclared capability", mode: "fake", run: "egress/allow_and_refuse", fails: true,
			want: []string{"--- FAIL: TestSuiteRefuses/egress/allow_and_refuse", "needs Capabilities.Egress", "declare the case in Options.Unsupported"}},
		{name: "undeclared host mounts", mode: "fake", run: "mounts/read_only", fails: true,
			want: []string{"--- FAIL: TestSuiteRefuses/mounts/read_only", "needs Capabilities.HostMounts"}},
		{name: "option not given", mode: "fake", run: "exec/cancel_frozen_agent", fails: true,
			want: []string{"--- FAIL: TestSuiteRefuses/exec/cancel_frozen_agent", "needs Options.FreezeAgent", "which the driver's test does not give"}},
		{name: "declared", mode: "declared", run: "egress/allow_and_refuse",
			want: []string{"--- SKIP: TestSuiteRefuses/egress/allow_and_refuse", "the driver does not support this: the fake has no egress"}},
		{name: "declared host mounts", mode: "declared", run: "mounts/read_only",
			want: []string{"--- SKIP: TestSuiteRefuses/mounts/read_only", "the fake shows no host paths"}},
		{name: "unknown name", mode: "unknown_name", run: "exec/lifecycle", fails: true,
			want: []string{`Options.Unsupported names "exec/no_such_case", which is not a case of the suite`}},
		{name: "no shell and no workload", mode: "no_shell", run: "exec/lifecycle", fails: true,
			want: []string{"--- FAIL: TestSuiteRefuses/exec/lifecycle", "has no shell", "give Options.Workload"}},
		{name: "a shell case on a driver without one", mode: "no_shell_workload", run: "exec/own_signal", fails: true,
			want: []string{"--- FAIL: TestSuiteRefuses/exec/own_signal", "needs Capabilities.Shell"}},
		{name: "a workload case on a driver without a shell", mode: "no_shell_workload", run: "exec/lifecycle",
			want: []string{"--- PASS: TestSuiteRefuses/exec/lifecycle"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			group, name, _ := strings.Cut(tt.run, "/")
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.v", "-test.count=1", "-test.run=^TestSuiteRefuses$/^"+group+"$/^"+name+"$")
			cmd.Env = append(os.Environ(), childEnv+"="+tt.mode)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tt.fails {
				t.Errorf("the suite run %s/%s ended with %v; want it to fail: %v\n%s", tt.mode, tt.run, err, tt.fails, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the run's output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
