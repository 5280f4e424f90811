//go:build linux

package native

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// holderEnv makes the test binary a helper that holds a sandbox until it
// is killed (see TestKilledOwner).
const holderEnv = "AIRLOCK_NATIVE_TEST_HOLDER"

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(holdSandbox())
	}
	agenttest.Main(m)
}

// requireNative skips (or fails, under AIRLOCK_TEST_REQUIRE) unless this
// host can run native sandboxes as the driver makes them by default: root,
// user namespaces, the cgroup version the driver will use (v1 wherever all
// its v1 controllers are mounted, as on hybrid hosts; v2 on a unified
// host), seccomp and Landlock (the driver fails closed without them).
func requireNative(t testing.TB) {
	t.Helper()
	testcap.Require(t, "root", "userns", drivertest.Cgroups(), "seccomp", "landlock")
}

func newDriver(t *testing.T) *Driver {
	t.Helper()
	d, err := New(Options{})
	if err != nil {
		t.Fatalf("native.New: %v", err)
	}
	return d
}

// TestConformance runs the suite on the driver as the daemon makes it:
// persistent, its sandboxes outliving the process that made them (the
// suite's restart cases reattach to them). TestConformanceWithoutShell
// runs it on the driver as a one-shot run makes it.
func TestConformance(t *testing.T) {
	requireNative(t)
	lc := &leakChecker{sandboxes: map[string]sandboxRecord{}}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Driver {
		d, err := New(Options{Persistent: true})
		if err != nil {
			t.Fatalf("native.New: %v", err)
		}
		return &recordingDriver{Driver: d, lc: lc}
	}, sandboxtest.Options{
		Leaks: lc.check,
		Egress: func(t *testing.T, proxy *egress.Proxy) sandbox.Driver {
			d, err := New(Options{Egress: proxy, Persistent: true})
			if err != nil {
				t.Fatalf("native.New: %v", err)
			}
			return &recordingDriver{Driver: d, lc: lc}
		},
		FreezeAgent: freezeAgent,
		KillAgent: func(t *testing.T, sb sandbox.Instance) {
			if err := sb.(*agentdriver.Instance).Host().(*host).proc.kill(); err != nil {
				t.Fatalf("kill the agent: %v", err)
			}
		},
	})
}

// freezeAgent stops the sandbox's agent with SIGSTOP; its commands run on.
func freezeAgent(t *testing.T, sb sandbox.Instance) func() {
	p := sb.(*agentdriver.Instance).Host().(*host).proc
	if err := p.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("stop the agent: %v", err)
	}
	return func() { _ = p.signal(syscall.SIGCONT) }
}

// recordingDriver notes what the leak check needs to know of each sandbox
// it makes: the host's mounts before it, and its host uid range.
type recordingDriver struct {
	*Driver
	lc *leakChecker
}

func (d *recordingDriver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	before := mountTable()
	in, err := d.Driver.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	d.lc.record(in.ID(), sandboxRecord{base: in.(*agentdriver.Instance).Host().(*host).base, mounts: before})
	return in, nil
}

type sandboxRecord struct {
	base   int             // first host uid of the sandbox's range
	mounts map[string]bool // the host's mount table before it was made
}

// leakChecker finds what a closed native sandbox left on the host.
type leakChecker struct {
	mu        sync.Mutex
	sandboxes map[string]sandboxRecord
}

func (lc *leakChecker) record(id string, r sandboxRecord) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.sandboxes[id] = r
}

// check fails t when anything of the sandbox id remains: a process in its
// uid range or its cgroups, a cgroup directory, a mount, its lock file, a
// held uid-range lock.
func (lc *leakChecker) check(t *testing.T, id string) {
	t.Helper()
	lc.mu.Lock()
	r, ok := lc.sandboxes[id]
	lc.mu.Unlock()
	if !ok {
		t.Errorf("leak check: sandbox %s was not made by this test's driver", id)
		return
	}
	checkLeaks(t, id, r)
}

func checkLeaks(t *testing.T, id string, r sandboxRecord) {
	t.Helper()
	drivertest.Leaks(t, id, func() []string { return findLeaks(id, r) })
}

// findLeaks lists what of the sandbox id remains: what any driver's
// sandbox can leave (drivertest.HostLeaks), and a process in its uid
// range, a mount, a held uid-range lock.
func findLeaks(id string, r sandboxRecord) []string {
	found := drivertest.HostLeaks(id)
	for _, p := range drivertest.Procs() {
		for _, u := range p.UIDs {
			if u >= r.base && u < r.base+rangeSize {
				found = append(found, fmt.Sprintf("process %d (%s, state %s) runs as host uid %d of the sandbox's range", p.PID, p.Name, p.State, u))
				break
			}
		}
	}
	for line := range mountTable() {
		if !r.mounts[line] && !othersMount(line) {
			found = append(found, "new mount: "+line)
		}
	}
	slot := filepath.Join("/run/airlock/uids", strconv.Itoa((r.base-0x10000000)/rangeSize)+".lock")
	if f, err := os.Open(slot); err == nil {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			found = append(found, "uid range lock "+slot+" is still held")
		}
		f.Close()
	}
	return found
}

// othersMount reports a host mount no native sandbox can have made: a
// namespace file bound to a path (runsc and ip-netns do that; the native
// driver never mounts on the host, and inside its own mount namespace it
// binds no namespace files), or a mount of a test rig's engine (the kube
// rig's containerd and kubelet, the Docker rig's engine). Other programs on
// the host, a gVisor or Kubernetes test for one, may make them while a
// test runs.
func othersMount(line string) bool {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return false
	}
	if f := strings.Fields(pre); len(f) > 4 && testrig.RigMount(mountinfo.Unescape(f[4])) {
		return true
	}
	return strings.HasPrefix(post, "nsfs ")
}

// mountTable returns the lines of this process's mount table, as a set: a
// snapshot to tell new mounts by.
func mountTable() map[string]bool {
	m := map[string]bool{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m[sc.Text()] = true
	}
	return m
}

// sandboxProcs returns the host pids of every process in the sandbox's
// cgroups or uid range.
func sandboxProcs(id string, base int) []int {
	var pids []int
	for _, p := range drivertest.Procs() {
		if p.SandboxCgroup(id) != "" || slices.ContainsFunc(p.UIDs, func(u int) bool { return u >= base && u < base+rangeSize }) {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// sandboxT creates a sandbox that is closed and leak-checked at the end of
// the test.
func sandboxT(t *testing.T, d *Driver, spec sandbox.Spec) sandbox.Instance {
	t.Helper()
	lc := &leakChecker{sandboxes: map[string]sandboxRecord{}}
	return drivertest.Sandbox(t, &recordingDriver{Driver: d, lc: lc}, spec, lc.check)
}

// TestMountsNodev: the suite's mounts/read_only checks that mounts are ro
// and nosuid as the table inside shows; native mounts are nodev too (gVisor's
// table does not show that option, so the suite cannot ask it of every
// driver).
func TestMountsNodev(t *testing.T) {
	requireNative(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in := sandboxT(t, newDriver(t), sandbox.Spec{Mounts: []sandbox.Mount{{Source: dir, Target: "/mnt/data"}, {Source: dir, Target: "/mnt/rw", Writable: true}}})
	out, _, res := drivertest.Run(t, in, "cat", "/proc/self/mountinfo")
	mounts, err := mountinfo.Parse(strings.NewReader(out))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the mount table inside: %v %+v", err, res)
	}
	for _, target := range []string{"/mnt/data", "/mnt/rw"} {
		i := slices.IndexFunc(mounts, func(m mountinfo.Mount) bool { return m.Point == target })
		if i < 0 || !slices.Contains(mounts[i].Options, "nodev") {
			t.Errorf("mount %s is not nodev: %+v", target, mounts)
		}
	}
}

// TestRootIncomplete: a root without the mount points the native driver
// needs (/proc, /dev, /tmp, /workspace) is refused at once, saying how to
// fix it. (gVisor needs none: its bundle holds them.)
func TestRootIncomplete(t *testing.T) {
	requireNative(t)
	d := newDriver(t)
	bare := t.TempDir()
	start := time.Now()
	in, err := d.Create(t.Context(), sandbox.Spec{Root: bare})
	if err == nil {
		in.Close(context.Background())
		t.Fatalf("a root without /proc, /dev, /tmp or /workspace was accepted")
	}
	if !strings.Contains(err.Error(), "mkdir") {
		t.Errorf("the error does not say how to fix the root: %v", err)
	}
	// The agent fails at once; Create must notice, not wait for a timeout.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Create took %v to fail on an incomplete root: %v", took, err)
	}
}

// holdSandbox is the helper process of TestKilledOwner: it makes a
// sandbox with a foreground and a background command, says so on stdout,
// and waits to be killed.
func holdSandbox() int {
	d, err := New(Options{})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx := context.Background()
	in, err := d.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Minute}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "1000"}, Background: true}); err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "sleep 1001 & sleep 1002"}}); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready", in.ID(), in.(*agentdriver.Instance).Host().(*host).base)
	select {}
}

// TestKilledOwner kills -9 a process that holds a sandbox. Its agent and
// every process in the sandbox must die at once (the agent's parent-death
// signal, then the pid namespace); what it leaves behind goes with the next
// driver's Reap.
func TestKilledOwner(t *testing.T) {
	requireNative(t)
	// Orphans come to this process instead of the host's init (which need
	// not reap them), so that the dead agent can be reaped here.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a subreaper: %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	t.Run("plain", func(t *testing.T) {
		h := startHolder(t)
		h.kill(t)
		if len(h.alive) > 0 {
			t.Errorf("2 s after its owner was killed, processes of the sandbox still run: %v of %v", h.alive, h.pids)
		} else if h.died > time.Second {
			t.Errorf("the sandbox's processes took %v to die after its owner was killed; want at once", h.died)
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + h.id)
		t.Logf("before Reap, the dead owner left %d cgroup directories", len(dirs))
		_ = newDriver(t).Sweep(t.Context())
		checkLeaks(t, h.id, sandboxRecord{base: h.base, mounts: h.mounts})
	})

	t.Run("during_a_kill", func(t *testing.T) {
		// The owner dies while it is killing an exec: on cgroup v1 that
		// group is frozen for the kill. Reap must still end everything.
		h := startHolder(t)
		d := newDriver(t)
		t.Cleanup(func() { unfreezeSandbox(t, d, h.id, h.agent) })
		freezeGroup(t, d, execGroupOf(t, d, h.id, "sleep\x001000\x00"))
		h.kill(t)
		start := time.Now()
		_ = d.Sweep(t.Context())
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Reap took %v", took)
		}
		// The agent could not finish dying while its sandbox was frozen;
		// now it can, and this process (its subreaper) reaps it.
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			var ws unix.WaitStatus
			if pid, _ := unix.Wait4(h.agent, &ws, unix.WNOHANG, nil); pid == h.agent {
				break
			}
		}
		checkLeaks(t, h.id, sandboxRecord{base: h.base, mounts: h.mounts})
	})
}

// TestCloseFrozenExec closes a sandbox while one of its exec groups is
// frozen, as the driver leaves it when its kill of that exec is cut short.
// Close must still end every process and remove every group, promptly.
func TestCloseFrozenExec(t *testing.T) {
	requireNative(t)
	d := newDriver(t)
	before := mountTable()
	in, err := d.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unfreezeSandbox(t, d, in.ID(), 0) })
	p, err := in.Start(t.Context(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "sleep 1003 & exec sleep 1004"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = p
	// The exec's own group, below the sandbox's workload group: the one
	// its two processes are in (the spare spawner's ready group, made
	// beside it, is empty).
	w := in.(*agentdriver.Instance).Host().(*host).workload
	var g *cgroup.Group
	for deadline := time.Now().Add(5 * time.Second); g == nil; time.Sleep(10 * time.Millisecond) {
		names, err := w.Children()
		for _, n := range names {
			if procs, _ := w.Child(n).Procs(); len(procs) >= 2 {
				g = w.Child(n)
			}
		}
		if g == nil && time.Now().After(deadline) {
			t.Fatalf("no exec group below the workload holds the exec's two processes: %v, %v", names, err)
		}
	}
	freezeGroup(t, d, g)
	start := time.Now()
	if err := in.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %v", took)
	}
	checkLeaks(t, in.ID(), sandboxRecord{base: in.(*agentdriver.Instance).Host().(*host).base, mounts: before})
}

// holder is a helper process holding a sandbox (see holdSandbox).
type holder struct {
	cmd    *exec.Cmd
	id     string
	base   int
	mounts map[string]bool // the host's mounts before it
	pids   []int           // the sandbox's processes on the host
	agent  int

	alive []int         // after kill: processes still running 2 s later
	died  time.Duration // after kill: how long they took to die
}

// startHolder starts the helper and waits until its sandbox runs its
// commands.
func startHolder(t *testing.T) *holder {
	t.Helper()
	h := &holder{mounts: mountTable()}
	h.cmd = exec.Command(os.Args[0])
	h.cmd.Env = append(os.Environ(), holderEnv+"=1")
	h.cmd.Stderr = os.Stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the holder said nothing: %v", err)
	}
	if _, err := fmt.Sscanf(line, "ready %s %d", &h.id, &h.base); err != nil {
		t.Fatalf("the holder said %q", line)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.pids = sandboxProcs(h.id, h.base)
		if len(h.pids) >= 5 || time.Now().After(deadline) { // agent, sleep 1000, sh, sleep 1001, sleep 1002
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(h.pids) < 5 {
		t.Fatalf("the held sandbox has %d processes on the host (%v), want at least 5", len(h.pids), h.pids)
	}
	for _, p := range drivertest.Procs() {
		if slices.Contains(h.pids, p.PID) && slices.Contains(p.UIDs, h.base) {
			h.agent = p.PID
		}
	}
	return h
}

// kill kills the holder with SIGKILL and watches the sandbox's processes
// die, for at most 2 s.
func (h *holder) kill(t *testing.T) {
	t.Helper()
	killed := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	for {
		h.alive = h.alive[:0]
		for _, pid := range h.pids {
			if running(pid) {
				h.alive = append(h.alive, pid)
			}
		}
		if len(h.alive) == 0 || time.Since(killed) > 2*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.died = time.Since(killed)
	t.Logf("killed the owner of sandbox %s with %d processes on the host (agent %d); after %v, %d still run",
		h.id, len(h.pids), h.agent, h.died.Round(time.Millisecond), len(h.alive))
	if h.agent != 0 {
		// The agent is this process's orphan now; reap it once it is dead
		// (it may still be finishing its exit when its processes are gone).
		var ws unix.WaitStatus
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if pid, err := unix.Wait4(h.agent, &ws, unix.WNOHANG, nil); pid == h.agent || err != nil || len(h.alive) > 0 {
				break
			}
		}
		t.Cleanup(func() { _, _ = unix.Wait4(h.agent, &ws, unix.WNOHANG, nil) })
	}
}

// execGroupOf returns the exec cgroup of the sandbox's process whose
// command line is cmdline.
func execGroupOf(t *testing.T, d *Driver, id, cmdline string) *cgroup.Group {
	t.Helper()
	for _, p := range drivertest.Procs() {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
		if string(b) != cmdline || p.SandboxCgroup(id) == "" {
			continue
		}
		for _, line := range strings.Split(p.Cgroup, "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && ((d.hier.V2 && f[0] == "0") || (!d.hier.V2 && slices.Contains(strings.Split(f[1], ","), "freezer"))) {
				return d.hier.Open(f[2])
			}
		}
	}
	t.Fatalf("no process %q in sandbox %s", cmdline, id)
	return nil
}

// freezeGroup freezes g, as the driver's kill does, and waits until it is.
func freezeGroup(t *testing.T, d *Driver, g *cgroup.Group) {
	t.Helper()
	file, value := filepath.Join(g.Path("freezer"), "freezer.state"), "FROZEN"
	if d.hier.V2 {
		file, value = filepath.Join(g.Path("memory"), "cgroup.freeze"), "1"
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		t.Fatalf("freeze %s: %v", file, err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if d.hier.V2 {
			if b, _ := os.ReadFile(filepath.Join(g.Path("memory"), "cgroup.events")); strings.Contains(string(b), "frozen 1") {
				return
			}
		} else if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) == "FROZEN" {
			return
		}
	}
	t.Fatalf("%s did not freeze", file)
}

// unfreezeSandbox undoes what a failed test left: it thaws every group of
// the sandbox, kills what runs in them, waits for agent (an orphan of this
// process, or 0) to die, and reaps the sandbox.
func unfreezeSandbox(t *testing.T, d *Driver, id string, agent int) {
	t.Helper()
	root, file, value := filepath.Join(d.hier.Mounts["freezer"], "airlock", id), "freezer.state", "THAWED"
	if d.hier.V2 {
		root, file, value = filepath.Join(d.hier.Mounts["memory"], "airlock", id), "cgroup.freeze", "0"
	}
	_ = filepath.WalkDir(root, func(p string, ent os.DirEntry, err error) error {
		if err == nil && ent.Name() == file {
			_ = os.WriteFile(p, []byte(value), 0)
		}
		return nil
	})
	for _, p := range drivertest.Procs() {
		if p.SandboxCgroup(id) != "" {
			_ = unix.Kill(p.PID, unix.SIGKILL)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); agent != 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var ws unix.WaitStatus
		if pid, _ := unix.Wait4(agent, &ws, unix.WNOHANG, nil); pid == agent {
			break
		}
	}
	time.Sleep(100 * time.Millisecond)
	_ = d.Sweep(t.Context())
}

// running says whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestRunConfinedAsExec: a one-shot run's command, sent with the agent's
// config on an exec socket, is confined as every exec is
// (docs/decisions.md, 91).
func TestRunConfinedAsExec(t *testing.T) {
	requireNative(t)
	drivertest.RunConfinedAsExec(t, newDriver(t))
}
