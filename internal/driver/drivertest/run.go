package drivertest

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// confinementScript prints what confines the process that runs it: its
// identity, capabilities, no_new_privs, seccomp mode, cgroups, and what
// Landlock and the root let it touch, then reads its stdin and exits 3.
const confinementScript = `id -u; id -g
grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status
cat /proc/self/cgroup
for p in /etc/shadow /usr/bin/x /proc/1/root/. /sys/kernel /dev/mem; do
  ( : > "$p" ) 2>/dev/null && echo "wrote $p" || echo "no write $p"
  ( cat "$p" >/dev/null ) 2>/dev/null && echo "read $p" || echo "no read $p"
done
echo "stdin: $(cat)"
exit 3`

// execIDs hides the exec's id in its cgroup's name: the first exec's and
// a later one's are alike but for it.
var execIDs = regexp.MustCompile(`\be[0-9]+\b`)

// RunConfinedAsExec checks that a command sent with its sandbox's config
// (sandbox.RunCreator, a one-shot run's) runs confined exactly as an exec
// of a sandbox made by Create: the same identity, capabilities,
// no_new_privs, seccomp filter, cgroups and file access, with its stdin,
// output and exit code carried as an exec's.
func RunConfinedAsExec(t *testing.T, d sandbox.Driver) {
	t.Helper()
	rc, ok := d.(sandbox.RunCreator)
	if !ok {
		t.Fatalf("driver %s sends no command with its config", d.Name())
	}
	run := func(viaConfig bool) (string, sandbox.Result) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var out, errb strings.Builder
		req := sandbox.ExecRequest{Argv: []string{"sh", "-c", confinementScript}, Stdin: strings.NewReader("fed"), Stdout: &out, Stderr: &errb}
		var sb sandbox.Instance
		var err error
		if viaConfig {
			sb, err = rc.CreateRun(ctx, sandbox.Spec{}, req)
		} else {
			sb, err = d.Create(ctx, sandbox.Spec{})
		}
		if err != nil {
			t.Fatalf("create (command with the config: %v): %v", viaConfig, err)
		}
		defer sb.Close(context.WithoutCancel(ctx))
		res, err := sandbox.Run(ctx, sb, req)
		if err != nil {
			t.Fatalf("run (command with the config: %v): %v", viaConfig, err)
		}
		if errb.Len() > 0 {
			t.Errorf("stderr (command with the config: %v): %q", viaConfig, errb.String())
		}
		return execIDs.ReplaceAllString(out.String(), "eN"), res
	}
	viaExec, execRes := run(false)
	viaConfig, runRes := run(true)
	if viaConfig != viaExec {
		t.Errorf("the command sent with the config ran otherwise than an exec:\n--- with the config:\n%s\n--- as an exec:\n%s", viaConfig, viaExec)
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "stdin: fed", "no write /etc/shadow"} {
		if !strings.Contains(viaConfig, want) {
			t.Errorf("the command sent with the config: no %q in\n%s", want, viaConfig)
		}
	}
	if runRes.ExitCode != 3 || execRes.ExitCode != 3 || runRes.Reason != sandbox.ReasonExit {
		t.Errorf("exit: with the config %+v, as an exec %+v; want 3 both", runRes, execRes)
	}
	// A command that cannot start is its result, as an exec's is.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req := sandbox.ExecRequest{Argv: []string{"/no/such/command"}}
	sb, err := rc.CreateRun(ctx, sandbox.Spec{}, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	res, err := sandbox.Run(ctx, sb, req)
	if err != nil || res.ExitCode != 127 {
		t.Errorf("a command not found sent with the config: %+v, %v; want exit 127", res, err)
	}
	// The sandbox serves on after its first command.
	if out, _, res := Run(t, sb, "echo", "again"); out != "again\n" || res.ExitCode != 0 {
		t.Errorf("a second exec: %q, %+v", out, res)
	}
}
