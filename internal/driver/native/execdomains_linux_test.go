package native

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestExecsAreApart checks that one exec cannot read another's
// /proc/PID/environ, though both run as the sandbox's uid: each exec is
// forked from a spawner thread of its own, in a Landlock domain of its own
// (decision 57), and Landlock refuses access across sibling domains. A
// command still reads its own children's.
func TestExecsAreApart(t *testing.T) {
	requireNative(t)
	d := newDriver(t)
	in := drivertest.Sandbox(t, d, sandbox.Spec{}, func(*testing.T, string) {})
	p, err := in.Start(t.Context(), sandbox.ExecRequest{
		Argv:       []string{"sh", "-c", "echo $$ > /tmp/other.pid; exec sleep 60"},
		Env:        []string{"OTHER_SECRET=f00d"},
		Background: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Signal(context.Background(), 9) })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _, _ := drivertest.Run(t, in, "cat", "/tmp/other.pid")
		if strings.TrimSpace(out) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first exec wrote no pid")
		}
	}
	out, stderr, res := drivertest.Run(t, in, "sh", "-c", `cat /proc/$(cat /tmp/other.pid)/environ`)
	if strings.Contains(out, "f00d") || res.ExitCode == 0 {
		t.Errorf("an exec read another exec's environment: exit %d, %q %q", res.ExitCode, out, stderr)
	}
	t.Logf("the other exec's environ: exit %d, %q", res.ExitCode, strings.TrimSpace(stderr))
	// The control: a command's own child, in its domain, is readable.
	var own strings.Builder
	res, err = sandbox.Run(t.Context(), in, sandbox.ExecRequest{
		Argv:   []string{"sh", "-c", `sleep 60 & cat /proc/$!/environ; kill $!`},
		Env:    []string{"OWN_SECRET=beef"},
		Stdout: &own,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(own.String(), "beef") {
		t.Errorf("a command could not read its own child's environment (exit %d): %q", res.ExitCode, own.String())
	}
}
