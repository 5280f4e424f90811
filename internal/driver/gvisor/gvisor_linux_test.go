package gvisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// holderEnv makes the test binary a helper that holds a sandbox until it
// is killed (see TestKilledOwner).
const holderEnv = "AIRLOCK_GVISOR_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holdSandbox())
	}
	agenttest.Main(m)
}

// holdSandbox makes a sandbox, prints its id and sleeps until killed.
func holdSandbox() int {
	d, err := New(Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	in, err := d.Create(context.Background(), sandbox.Spec{Limits: smallLimits})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(in.ID())
	time.Sleep(time.Minute)
	return 0
}

// requireGVisor skips (or fails, under AIRLOCK_TEST_REQUIRE) unless this
// host can run gVisor sandboxes as the driver makes them by default: root,
// the cgroups the driver will use, and a runsc that really runs one (the
// runsc capability probes the same runsc the driver uses).
func requireGVisor(t *testing.T) {
	t.Helper()
	testcap.Require(t, "root", drivertest.Cgroups(), "runsc")
}

func newDriver(t *testing.T) *Driver {
	t.Helper()
	d, err := New(Options{})
	if err != nil {
		t.Fatalf("gvisor.New: %v", err)
	}
	return d
}

// Unsupported are the cases of the conformance suite that this driver
// cannot pass the same way, and why: none.
//
// limits/memory passes: the host's OOM killer picks the largest process
// of the sandbox's host cgroup, and for a memory bomb that is the stub
// process that maps the bomb's memory; gVisor then kills the bomb with
// SIGKILL and the sandbox lives on. When the Sentry itself holds the most
// (a workload that filled its tmpfs, whose pages the Sentry maps), the OOM
// ends the whole sandbox; TestOOMEndsSandbox checks that this is reported
// as an OOM, with no result lost.
var Unsupported = map[string]string{}

// TestConformance runs the suite on the driver as the daemon makes it:
// persistent, its sandboxes outliving the process that made them (the
// suite's restart cases reattach to them).
func TestConformance(t *testing.T) {
	requireGVisor(t)
	lc := &leakChecker{}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Driver {
		d, err := New(Options{Persistent: true})
		if err != nil {
			t.Fatalf("gvisor.New: %v", err)
		}
		return d
	}, sandboxtest.Options{
		Unsupported: Unsupported, Leaks: lc.check,
		Egress: func(t *testing.T, proxy *egress.Proxy) sandbox.Driver {
			d, err := New(Options{Egress: proxy, Persistent: true})
			if err != nil {
				t.Fatalf("gvisor.New: %v", err)
			}
			return d
		},
		FreezeAgent: freezeSandbox,
		// The agent is the container's init inside gVisor: killing runsc
		// (SIGKILL) kills it, as the host sees it, at once.
		KillAgent: func(t *testing.T, sb sandbox.Instance) {
			if err := sb.(*agentdriver.Instance).Host().(*host).cmd.Process.Kill(); err != nil {
				t.Fatalf("kill runsc: %v", err)
			}
		},
	})
}

// freezeSandbox freezes the sandbox's host cgroup: runsc, gVisor's kernel
// and with it the agent stop answering.
func freezeSandbox(t *testing.T, sb sandbox.Instance) func() {
	g := sb.(*agentdriver.Instance).Host().(*host).group
	if g == nil {
		t.Fatal("the sandbox has no host cgroup to freeze")
	}
	if err := g.Freeze(5 * time.Second); err != nil {
		t.Fatalf("freeze the sandbox: %v", err)
	}
	return func() { g.Thaw() }
}

// leakChecker finds what a closed gVisor sandbox left on the host.
type leakChecker struct{ mu sync.Mutex }

// check fails t when anything of the sandbox id remains: what any driver's
// sandbox can leave (drivertest.HostLeaks: a process in its cgroups, a
// cgroup directory, the lock), a runsc process of it (runsc, runsc-gofer,
// runsc-sandbox, all name the id), runsc's state, the bundle.
func (lc *leakChecker) check(t *testing.T, id string) {
	t.Helper()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	drivertest.Leaks(t, id, func() []string { return findLeaks(id) })
}

func findLeaks(id string) []string {
	found := drivertest.HostLeaks(id)
	for _, p := range drivertest.Procs() {
		for _, a := range p.Cmdline {
			if a == id || strings.HasSuffix(a, "/"+id) {
				found = append(found, fmt.Sprintf("process %d runs for the sandbox: %q", p.PID, strings.Join(p.Cmdline, " ")))
				break
			}
		}
	}
	state, _ := filepath.Glob(filepath.Join("/run/airlock/gvisor/state", "*"+id+"*"))
	for _, f := range state {
		found = append(found, "runsc state "+f)
	}
	if bundle := "/run/airlock/gvisor/bundles/" + id; exists(bundle) {
		found = append(found, bundle)
	}
	return found
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// sandboxT creates a sandbox that is closed and leak-checked at the end of
// the test.
func sandboxT(t *testing.T, d *Driver, spec sandbox.Spec) sandbox.Instance {
	t.Helper()
	return drivertest.Sandbox(t, d, spec, (&leakChecker{}).check)
}

var smallLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 5 * time.Second, DiskBytes: 16 << 20, TmpBytes: 16 << 20}

// checkEnded checks that every call on a sandbox that has ended fails at
// once with an error that says so.
func checkEnded(t *testing.T, in sandbox.Instance) {
	t.Helper()
	start := time.Now()
	_, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, sandbox.ErrClosed) || !strings.Contains(err.Error(), "ended") {
		t.Errorf("Exec on an ended sandbox: %v, want an error wrapping ErrClosed that says it ended", err)
	}
	if _, err := in.Files().Stat(t.Context(), "/workspace"); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Stat on an ended sandbox: %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("calls on an ended sandbox took %v", d)
	}
}

// TestOOMEndsSandbox: an OOM that the host's OOM killer settles by killing
// gVisor's kernel (here: /workspace holds 150 MiB, which the Sentry maps,
// and then a memory bomb) ends the whole sandbox. The exec's result must
// still say oom, the sandbox must be reported ended, and later calls must
// fail at once with "out of memory", not hang.
func TestOOMEndsSandbox(t *testing.T) {
	requireGVisor(t)
	l := smallLimits
	l.DiskBytes = 200 << 20
	in := sandboxT(t, newDriver(t), sandbox.Spec{Limits: l})
	if _, _, res := drivertest.Run(t, in, "dd", "if=/dev/zero", "of=/workspace/big", "bs=1M", "count=150"); res.ExitCode != 0 {
		t.Fatalf("fill /workspace: %+v", res)
	}
	res, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{
		Argv: []string{"python3", "-c", "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"},
	})
	if err != nil {
		t.Fatalf("the result is lost when the OOM ends the sandbox: %v", err)
	}
	if res.Reason != sandbox.ReasonOOM || !res.Hit(sandbox.LimitMemory) || res.Signal != "SIGKILL" || !strings.Contains(res.Message, "memory limit") {
		t.Errorf("an OOM: want reason oom, memory hit, SIGKILL, a message about the memory limit; got %+v", res)
	}
	select {
	case <-in.Done():
	case <-time.After(5 * time.Second):
		// The Sentry maps the 150 MiB of /workspace, the bomb less than
		// the 224 MiB the host cgroup allows: the OOM killer picks the
		// Sentry.
		t.Fatalf("the sandbox is not reported ended after the OOM (did the OOM killer pick the bomb, not gVisor's kernel?): %+v", res)
	}
	if !strings.Contains(res.Message, "ended the whole sandbox") {
		t.Errorf("the message does not say the sandbox ended: %q", res.Message)
	}
	checkEnded(t, in)
	_, err = sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("Exec after the OOM: %v, want \"out of memory\"", err)
	}
}

// TestPidsHeadroom: the host cgroup holds gVisor's own processes, so its
// limit is sized above the workload's; the workload's limit holds inside,
// however many processes it starts.
func TestPidsHeadroom(t *testing.T) {
	requireGVisor(t)
	l := smallLimits
	l.Pids = 8
	in := sandboxT(t, newDriver(t), sandbox.Spec{Limits: l})
	out, _, res := drivertest.Run(t, in, "python3", "-c", `
import os, time
ok = 0
for _ in range(30):
    try:
        if os.fork() == 0:
            time.sleep(2); os._exit(0)
        ok += 1
    except OSError:
        pass
print(ok)
`)
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	if res.ExitCode != 0 || n < 4 || n >= 8 {
		t.Errorf("forking 30 times under a limit of 8: %d forks succeeded (%+v), want the limit to hold inside", n, res)
	}
	if !res.Hit(sandbox.LimitPids) {
		t.Errorf("the pids limit was reached but not reported: %+v", res)
	}
	if o, _, r := drivertest.Run(t, in, "echo", "ok"); o != "ok\n" || r.ExitCode != 0 {
		t.Errorf("after the pids limit the sandbox does not work: %q %+v", o, r)
	}
}

// TestHostPidsTooLow: when runsc itself cannot start within the host's
// process limit, Create fails at once with an error that says so (pids),
// and leaves nothing behind.
func TestHostPidsTooLow(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)
	orig := hostPidsBase
	t.Cleanup(func() { hostPidsBase = orig })
	l := smallLimits
	l.Pids = 2
	hostPidsBase = 8 - 2*hostPidsPerProc // 8 host tasks: not enough for runsc
	id := "pidslow-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	start := time.Now()
	in, err := d.Create(t.Context(), sandbox.Spec{ID: id, Limits: l})
	if err == nil {
		in.Close(context.Background())
		t.Fatalf("runsc started within 8 host tasks; the test needs a lower limit")
	}
	t.Logf("Create: %v", err)
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "(pids)") {
		t.Errorf("Create under a too-low host pids limit: %v, want an error wrapping ErrLimit that names pids", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("failing took %v", took)
	}
	(&leakChecker{}).check(t, id)
}

// TestNoNestedUserNamespace: inside gVisor the seccomp filter lets clone3
// through (the agent forks with it), and gVisor has no
// user.max_user_namespaces; commands are chrooted so that gVisor itself
// refuses them a user namespace. Neither clone3 nor clone nor unshare may
// make one.
func TestNoNestedUserNamespace(t *testing.T) {
	requireGVisor(t)
	in := sandboxT(t, newDriver(t), sandbox.Spec{Limits: smallLimits})
	out, errOut, res := drivertest.Run(t, in, "python3", "-c", `
import ctypes, errno, os, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER = 0x10000000
def report(name, r):
    if r == 0:
        os._exit(0)  # the child
    if r < 0:
        print(name, "refused", errno.errorcode.get(ctypes.get_errno()))
    else:
        os.waitpid(r, 0)
        print(name, "made a user namespace")
args = struct.pack("11Q", CLONE_NEWUSER, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
report("clone3", libc.syscall(435, ctypes.create_string_buffer(args, len(args)), len(args)))
report("clone", libc.syscall(56, CLONE_NEWUSER | 17, 0, 0, 0, 0))
r = libc.unshare(CLONE_NEWUSER)
print("unshare", "refused" if r < 0 else "made a user namespace")
`)
	if res.ExitCode != 0 || strings.Count(out, "refused") != 3 {
		t.Errorf("nested user namespaces inside gVisor: %q %q %+v; want all three refused", out, errOut, res)
	}
}

// TestAgentCapabilities: the agent, PID 1 inside, holds exactly the
// capabilities the bundle gives it, no more (it does not drop them again
// inside gVisor), and a command none.
func TestAgentCapabilities(t *testing.T) {
	requireGVisor(t)
	in := sandboxT(t, newDriver(t), sandbox.Spec{Limits: smallLimits})
	out, _, res := drivertest.Run(t, in, "sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd)' /proc/1/status; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status")
	want := uint64(0)
	for _, c := range []int{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL, unix.CAP_SETPCAP, unix.CAP_SYS_ADMIN,
		unix.CAP_SYS_CHROOT, unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER} {
		want |= 1 << c
	}
	if len(agent.ContainedCaps) != 9 {
		t.Fatalf("agent.ContainedCaps changed (%q): update this test", agent.ContainedCaps)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if res.ExitCode != 0 || len(lines) != 6 {
		t.Fatalf("read capabilities: %q %+v", out, res)
	}
	for i, line := range lines {
		f := strings.Fields(line)
		got, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		if i < 3 && got != want {
			t.Errorf("the agent's %s %#x, want %#x", f[0], got, want)
		}
		if i >= 3 && got != 0 {
			t.Errorf("a command's %s %#x, want none", f[0], got)
		}
	}
}

func TestProbe(t *testing.T) {
	requireGVisor(t)
	if err := newDriver(t).Probe(t.Context()); err != nil {
		t.Fatalf("Probe on a host that runs gVisor: %v", err)
	}
	dir := t.TempDir()
	fake := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\ncase \"$1\" in --version) echo 'runsc version fake'; exit 0;; flags) exit 0;; esac\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orig := probeTimeout
	t.Cleanup(func() { probeTimeout = orig })
	probeTimeout = time.Second
	for _, tt := range []struct {
		name, body, want string
	}{
		{"fails", "echo 'cannot create sandbox: boom' >&2; exit 1\n", "boom"},
		{"hangs", "exec sleep 60\n", "did not finish"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(Options{Runsc: fake(tt.name, tt.body)})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = d.Probe(t.Context())
			if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Probe with a runsc that %s: %v, want ErrUnsupported saying %q", tt.name, err, tt.want)
			}
			// The bound, and the close of what it started (which waits up
			// to 5 s for runsc to exit when told to).
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Probe took %v with a 1 s timeout", took)
			}
		})
	}
}

// TestProbeAgentStart: Probe is the check Create relies on. With a runsc
// that runs a bare command but cannot start the agent (Debian's 2022
// build, which the deps step installs at /usr/bin/runsc), Probe fails,
// naming the fix, as Create does; and it leaves nothing behind.
func TestProbeAgentStart(t *testing.T) {
	requireGVisor(t)
	const debian = "/usr/bin/runsc"
	if _, err := os.Stat(debian); err != nil {
		testcap.SkipOrFail(t, "runsc", "no Debian runsc at %s to probe (apt-get install runsc): %v", debian, err)
	}
	d, err := New(Options{Runsc: debian})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(debian, "--network=none", "--platform="+d.platform, "do", "true").CombinedOutput(); err != nil {
		t.Fatalf("%s runs no bare command here either (%v: %s): the test needs one that does", debian, err, out)
	}
	before := bundles(t)
	err = d.Probe(t.Context())
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "make runsc") || !strings.Contains(err.Error(), "agent") {
		t.Errorf("Probe with %s: %v, want ErrUnsupported naming the agent and `make runsc`", debian, err)
	}
	if in, err := d.Create(t.Context(), sandbox.Spec{Limits: smallLimits}); err == nil {
		in.Close(context.Background())
		t.Errorf("Create with %s works, though Probe said it cannot", debian)
	}
	if after := bundles(t); after != before {
		t.Errorf("Probe left a bundle behind: %s, was %s", after, before)
	}
	// The pinned runsc (the default) passes the same probe.
	if err := newDriver(t).Probe(t.Context()); err != nil {
		t.Errorf("Probe with the default runsc: %v", err)
	}
	if after := bundles(t); after != before {
		t.Errorf("Probe left a bundle behind: %s, was %s", after, before)
	}
}

// bundles lists the bundles of the gVisor sandboxes on the host.
func bundles(t *testing.T) string {
	t.Helper()
	m, err := filepath.Glob("/run/airlock/gvisor/bundles/*")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(m, " ")
}

// TestIDInUse: a second sandbox of a name in use is refused, and the first
// one is left alone.
func TestIDInUse(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)
	id := "inuse-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	in := sandboxT(t, d, sandbox.Spec{ID: id, Limits: smallLimits})
	if other, err := d.Create(t.Context(), sandbox.Spec{ID: id, Limits: smallLimits}); !errors.Is(err, sandbox.ErrExists) {
		if err == nil {
			other.Close(context.Background())
		}
		t.Fatalf("a second sandbox %s: %v, want ErrExists", id, err)
	}
	if o, _, r := drivertest.Run(t, in, "echo", "ok"); o != "ok\n" || r.ExitCode != 0 {
		t.Errorf("the first sandbox no longer works: %q %+v", o, r)
	}
}

// TestKilledOwner: when the airlock process that made a sandbox is killed
// (SIGKILL, no cleanup), the sandbox ends by itself (its agent reads EOF)
// and the next driver's sweep removes what is left: the bundle, the
// cgroup, the lock.
func TestKilledOwner(t *testing.T) {
	requireGVisor(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	id := strings.TrimSpace(line)
	if err != nil || !sandbox.ValidID(id) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the holder made no sandbox: %q %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	d := newDriver(t)
	_ = d.Sweep(t.Context())
	(&leakChecker{}).check(t, id)
}

// TestRunConfinedAsExec: a one-shot run's command, sent with the agent's
// config and attached to by the host, is confined as every exec is
// (docs/decisions.md, 91).
func TestRunConfinedAsExec(t *testing.T) {
	requireGVisor(t)
	drivertest.RunConfinedAsExec(t, newDriver(t))
}
