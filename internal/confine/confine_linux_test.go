package confine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv, when set, makes the test binary a helper that confines one
// thread and starts a child from it; its value is a helperConfig in JSON.
const helperEnv = "AIRLOCK_CONFINE_HELPER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		// Keep the main goroutine on the main thread, so that the confined
		// goroutine never lands there: the runtime parks a locked main
		// thread forever instead of letting it exit.
		runtime.LockOSThread()
		os.Exit(runHelper(cfg))
	}
	os.Exit(m.Run())
}

// skipOrFail skips the test, or fails it when AIRLOCK_TEST_REQUIRE names
// capability. (A local stand-in until the shared test helper exists.)
func skipOrFail(t *testing.T, capability, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if slices.Contains(strings.Split(os.Getenv("AIRLOCK_TEST_REQUIRE"), ","), capability) {
		t.Fatalf("AIRLOCK_TEST_REQUIRE names %s, but: %s", capability, msg)
	}
	t.Skipf("%s (capability %s)", msg, capability)
}

// requireConfinement checks that this host can run every layer: root for
// the bounding set and the child's credentials, seccomp filters, Landlock.
func requireConfinement(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "root", "dropping the bounding set and switching the child's uid need root")
	}
	const need = 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID | 1<<unix.CAP_SETPCAP
	eff, err := strconv.ParseUint(taskStatus("/proc/self/status")["CapEff"], 16, 64)
	if err != nil || eff&need != need {
		skipOrFail(t, "root", "root lacks CAP_SETUID, CAP_SETGID or CAP_SETPCAP here (CapEff %x, %v)", eff, err)
	}
	if err := Supported(); err != nil {
		skipOrFail(t, "seccomp", "seccomp filters do not work here: %v", err)
	}
	abi := LandlockABI()
	if abi < 1 {
		skipOrFail(t, "landlock", "Landlock is not available on this kernel")
	}
	return abi
}

// helperConfig tells the helper what to run and how to confine it.
type helperConfig struct {
	Confine   bool // false: start the child unconfined, as a control
	Argv      []string
	Env       []string
	ReadExec  []string
	ReadWrite []string
	Uid, Gid  int
	// Outside is a directory the confined thread may not write to; the
	// helper writes to it from another thread.
	Outside string
}

// runHelper confines a locked thread, forks the child from it, and reports
// on stdout ("helper.<key>=<value>" lines) how the child ended and what the
// helper's other threads look like meanwhile. The child writes to the same
// stdout.
func runHelper(cfgJSON string) int {
	var cfg helperConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Printf("helper.error=parse config: %v\n", err)
		return 3
	}
	say := func(k string, v any) { fmt.Printf("helper.%s=%v\n", k, v) }

	type started struct {
		pid, tid, abi int
		err           error
	}
	startedc := make(chan started, 1)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		s := started{tid: unix.Gettid()}
		s.pid, s.abi, s.err = confineAndStart(cfg)
		startedc <- s
		<-release // keep the confined thread alive while it is inspected
	}()
	s := <-startedc
	if s.err != nil {
		say("error", s.err)
		return 3
	}
	say("landlock_abi", s.abi)
	say("confined_tid_is_main", s.tid == os.Getpid())

	// Every thread's state while the confined one still exists.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		say("error", err)
		return 3
	}
	confinedOthers := 0
	for _, task := range tasks {
		st := taskStatus("/proc/self/task/" + task.Name() + "/status")
		if task.Name() == strconv.Itoa(s.tid) {
			say("confined.nnp", st["NoNewPrivs"])
			say("confined.seccomp", st["Seccomp"])
			say("confined.capbnd", st["CapBnd"])
			continue
		}
		if st["NoNewPrivs"] != "0" || st["Seccomp"] != "0" || st["CapBnd"] == "0000000000000000" {
			confinedOthers++
		}
	}
	say("threads", len(tasks))
	say("confined_others", confinedOthers)

	// Another thread can still do what the filter and the ruleset forbid.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if unix.Gettid() == s.tid {
			say("error", "the confined thread ran another goroutine")
			return
		}
		nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
		say("other.nnp", fmt.Sprint(nnp, err))
		_, _, errno := unix.Syscall(1000, 0, 0, 0)
		say("other.unknown_syscall", unix.ErrnoName(errno))
		err = os.WriteFile(filepath.Join(cfg.Outside, "from-helper"), []byte("x"), 0o644)
		say("other.write_outside", err == nil)
	}()
	<-done

	close(release)
	gone := false
	for range 500 {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid)); errors.Is(err, os.ErrNotExist) {
			gone = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	say("confined_thread_exited", gone)

	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(s.pid, &ws, 0, nil); err != nil {
		say("error", fmt.Errorf("wait for child: %w", err))
		return 3
	}
	say("exit", ws.ExitStatus())
	return 0
}

// confineAndStart runs on a locked thread: it confines the thread (unless
// cfg says not to) and forks the child from it.
func confineAndStart(cfg helperConfig) (pid, abi int, err error) {
	if cfg.Confine {
		f, err := Workload()
		if err != nil {
			return 0, 0, err
		}
		if err := SetNoNewPrivs(); err != nil {
			return 0, 0, err
		}
		if err := DropBoundingSet(); err != nil {
			return 0, 0, err
		}
		l := Landlock{ReadExec: cfg.ReadExec, ReadWrite: cfg.ReadWrite, Scoped: true}
		if abi, err = l.RestrictThread(); err != nil {
			return 0, 0, err
		}
		if err := f.InstallThread(); err != nil {
			return 0, 0, err
		}
	}
	pid, err = syscall.ForkExec(cfg.Argv[0], cfg.Argv, &syscall.ProcAttr{
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: uint32(cfg.Uid), Gid: uint32(cfg.Gid)},
		},
	})
	return pid, abi, err
}

// taskStatus reads the fields of a /proc status file.
func taskStatus(path string) map[string]string {
	m := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return m
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// fixture is a directory tree and two unconfined peers for the child to
// try to reach.
type fixture struct {
	inside, outside string
	sleeper         *exec.Cmd // an unconfined process of the child's uid
	abstract        string    // an abstract unix socket the test listens on
}

const nobody = 65534

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base, err := os.MkdirTemp("", "confine-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	f := &fixture{inside: filepath.Join(base, "inside"), outside: filepath.Join(base, "outside")}
	// Plain permissions let the child's uid in everywhere, so that any
	// denial seen comes from Landlock.
	for _, d := range []string{f.inside, filepath.Join(f.inside, "sub"), f.outside} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.outside, "secret"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	f.sleeper = exec.Command("/bin/sleep", "120")
	f.sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := f.sleeper.Start(); err != nil {
		t.Fatalf("start the unconfined peer: %v", err)
	}
	t.Cleanup(func() {
		_ = f.sleeper.Process.Kill()
		_ = f.sleeper.Wait()
	})

	f.abstract = fmt.Sprintf("airlock-confine-test-%d", os.Getpid())
	ln, err := net.Listen("unix", "@"+f.abstract)
	if err != nil {
		t.Fatalf("listen on an abstract socket: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return f
}

// runHelperProcess re-executes the test binary as a helper and returns the
// key=value lines it and its child printed, and its stderr.
func runHelperProcess(t *testing.T, cfg helperConfig) (map[string]string, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	if e, ok := kv["helper.error"]; ok {
		t.Fatalf("helper: %s\nstderr:\n%s", e, stderr.String())
	}
	return kv, stderr.String()
}

func (f *fixture) config(confine bool, argv ...string) helperConfig {
	return helperConfig{
		Confine: confine,
		Argv:    argv,
		Env: []string{
			"PATH=/usr/bin:/bin", "HOME=" + f.inside, "PYTHONDONTWRITEBYTECODE=1",
			"INSIDE=" + f.inside, "OUTSIDE=" + f.outside,
			"PEER_PID=" + strconv.Itoa(f.sleeper.Process.Pid), "ABSTRACT=" + f.abstract,
			fmt.Sprintf("SYS_KEYCTL=%d", unix.SYS_KEYCTL),
			fmt.Sprintf("SYS_UNSHARE=%d", unix.SYS_UNSHARE),
			fmt.Sprintf("SYS_CLONE=%d", unix.SYS_CLONE),
			fmt.Sprintf("CLONE_NEWUSER=%d", unix.CLONE_NEWUSER),
		},
		ReadExec:  []string{"/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/nonexistent/airlock"},
		ReadWrite: []string{f.inside, "/dev/null"},
		Uid:       nobody,
		Gid:       nobody,
		Outside:   f.outside,
	}
}

// probe runs in the child. Each line is check=result, where a result is OK,
// an errno name, or a value. Risky calls run in a forked grandchild that
// reports the errno as its exit code.
const probe = `
import ctypes, errno, os, socket, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
env = os.environ
def out(k, v): print(f"{k}={v}", flush=True)
def name(e): return "OK" if e == 0 else errno.errorcode.get(e, str(e))
def sc(nr, *a):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    return 0 if r != -1 else ctypes.get_errno()
def forked(fn):
    pid = os.fork()
    if pid == 0:
        try: os._exit(fn())
        except BaseException: os._exit(255)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
def oserr(fn):
    try: fn(); return 0
    except OSError as e: return e.errno
def clone_newuser():
    r = libc.syscall(ctypes.c_long(int(env["SYS_CLONE"])), ctypes.c_long(int(env["CLONE_NEWUSER"]) | 17), 0, 0, 0, 0)
    if r == 0: os._exit(0)
    if r < 0: return ctypes.get_errno()
    os.waitpid(r, 0); return 0
def write(p):
    with open(p, "w") as f: f.write("x")
def read(p):
    with open(p) as f: return f.read()
def threaded():
    res = []
    t = threading.Thread(target=lambda: res.append(1)); t.start(); t.join()
    return 0 if res == [1] else 1
def tcp():
    ln = socket.socket(); ln.bind(("127.0.0.1", 0)); ln.listen()
    c = socket.create_connection(ln.getsockname()); c.close(); ln.close()
def abstract():
    s = socket.socket(socket.AF_UNIX); s.connect("\0" + env["ABSTRACT"]); s.close()
st = dict(l.split(":\t", 1) for l in read("/proc/self/status").splitlines() if ":\t" in l)
out("uid", os.getuid())
out("status.nnp", st["NoNewPrivs"].strip())
out("status.capbnd", st["CapBnd"].strip())
out("status.seccomp", st["Seccomp"].strip())
out("ptrace_traceme", name(forked(lambda: 0 if libc.ptrace(0, 0, 0, 0) == 0 else ctypes.get_errno())))
out("keyctl", name(sc(int(env["SYS_KEYCTL"]), 0, -3, 0)))
out("unshare_user", name(forked(lambda: sc(int(env["SYS_UNSHARE"]), int(env["CLONE_NEWUSER"])))))
out("clone_newuser", name(forked(clone_newuser)))
out("personality_no_randomize", name(forked(lambda: 0 if libc.personality(0x0040000) != -1 else ctypes.get_errno())))
out("unknown_syscall", name(sc(1000)))
out("socket_packet", name(oserr(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())))
out("socket_raw", name(oserr(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.IPPROTO_ICMP).close())))
out("tcp_loopback", name(oserr(tcp)))
out("thread", name(threaded()))
out("subprocess_true", subprocess.run(["true"]).returncode)
out("read_hostname", name(oserr(lambda: read("/etc/hostname"))))
out("read_outside", name(oserr(lambda: read(env["OUTSIDE"] + "/secret"))))
out("write_outside", name(oserr(lambda: write(env["OUTSIDE"] + "/x"))))
out("write_inside", name(oserr(lambda: write(env["INSIDE"] + "/a"))))
out("truncate_inside", name(oserr(lambda: os.truncate(env["INSIDE"] + "/a", 0))))
out("rename_inside", name(oserr(lambda: os.rename(env["INSIDE"] + "/a", env["INSIDE"] + "/sub/b"))))
out("write_devnull", name(oserr(lambda: write("/dev/null"))))
out("signal_outside", name(oserr(lambda: os.kill(int(env["PEER_PID"]), 0))))
out("abstract_outside", name(oserr(abstract)))
`

func TestConfinedChild(t *testing.T) {
	abi := requireConfinement(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		skipOrFail(t, "python3", "the probe needs %s: %v", python, err)
	}
	f := newFixture(t)
	confined, stderr := runHelperProcess(t, f.config(true, python, "-c", probe))
	if stderr != "" {
		t.Logf("confined child's stderr:\n%s", stderr)
	}
	control, stderr := runHelperProcess(t, f.config(false, python, "-c", probe))
	if stderr != "" {
		t.Logf("control child's stderr:\n%s", stderr)
	}

	// want is a value or "!value" (anything else); minABI is the Landlock
	// ABI the confined result needs.
	tests := []struct {
		key              string
		confined, contrl string
		minABI           int
	}{
		{key: "helper.exit", confined: "0", contrl: "0"},
		{key: "uid", confined: "65534", contrl: "65534"},
		{key: "status.nnp", confined: "1", contrl: "0"},
		{key: "status.capbnd", confined: "0000000000000000", contrl: "!0000000000000000"},
		{key: "status.seccomp", confined: "2", contrl: "0"},
		{key: "ptrace_traceme", confined: "EPERM", contrl: "OK"},
		{key: "keyctl", confined: "EPERM", contrl: "!EPERM"},
		{key: "unshare_user", confined: "EPERM", contrl: "OK"},
		{key: "clone_newuser", confined: "EPERM", contrl: "OK"},
		{key: "personality_no_randomize", confined: "EPERM", contrl: "OK"},
		{key: "unknown_syscall", confined: "EPERM", contrl: "ENOSYS"},
		{key: "socket_packet", confined: "EPERM", contrl: "!OK"},
		{key: "socket_raw", confined: "EPERM", contrl: "!OK"},
		{key: "tcp_loopback", confined: "OK", contrl: "OK"},
		{key: "thread", confined: "OK", contrl: "OK"},
		{key: "subprocess_true", confined: "0", contrl: "0"},
		{key: "read_hostname", confined: "OK", contrl: "OK"},
		{key: "read_outside", confined: "EACCES", contrl: "OK"},
		{key: "write_outside", confined: "EACCES", contrl: "OK"},
		{key: "write_inside", confined: "OK", contrl: "OK"},
		{key: "truncate_inside", confined: "OK", contrl: "OK"},
		{key: "rename_inside", confined: "OK", contrl: "OK"},
		{key: "write_devnull", confined: "OK", contrl: "OK"},
		{key: "signal_outside", confined: "EPERM", contrl: "OK", minABI: 6},
		{key: "abstract_outside", confined: "EPERM", contrl: "OK", minABI: 6},
		// The helper's view: the confined thread was confined, no other
		// thread was, and the confined thread ended with its goroutine.
		{key: "helper.landlock_abi", confined: strconv.Itoa(abi), contrl: "0"},
		{key: "helper.confined.nnp", confined: "1", contrl: "0"},
		{key: "helper.confined.seccomp", confined: "2", contrl: "0"},
		{key: "helper.confined.capbnd", confined: "0000000000000000", contrl: "!0000000000000000"},
		{key: "helper.confined_others", confined: "0", contrl: "0"},
		{key: "helper.other.nnp", confined: "0 <nil>", contrl: "0 <nil>"},
		{key: "helper.other.unknown_syscall", confined: "ENOSYS", contrl: "ENOSYS"},
		{key: "helper.other.write_outside", confined: "true", contrl: "true"},
		{key: "helper.confined_tid_is_main", confined: "false", contrl: "false"},
		{key: "helper.confined_thread_exited", confined: "true", contrl: "true"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if abi < tt.minABI {
				skipOrFail(t, "landlock", "needs Landlock ABI %d, the kernel has %d", tt.minABI, abi)
			}
			check(t, "confined", confined, tt.key, tt.confined)
			check(t, "control", control, tt.key, tt.contrl)
		})
	}
	if n, _ := strconv.Atoi(confined["helper.threads"]); n < 2 {
		t.Errorf("the helper had %d threads; the other-thread checks need more than one", n)
	}
}

func check(t *testing.T, run string, got map[string]string, key, want string) {
	t.Helper()
	v, ok := got[key]
	switch {
	case !ok:
		t.Errorf("%s: no result for %s", run, key)
	case strings.HasPrefix(want, "!") && v == want[1:]:
		t.Errorf("%s: %s = %q, want anything else", run, key, v)
	case !strings.HasPrefix(want, "!") && v != want:
		t.Errorf("%s: %s = %q, want %q", run, key, v, want)
	}
}

// TestConfinedUnshare runs the unshare tool, which a workload might use to
// escape into a fresh user namespace.
func TestConfinedUnshare(t *testing.T) {
	requireConfinement(t)
	const unshare = "/usr/bin/unshare"
	if _, err := os.Stat(unshare); err != nil {
		skipOrFail(t, "unshare", "needs %s: %v", unshare, err)
	}
	f := newFixture(t)
	control, stderr := runHelperProcess(t, f.config(false, unshare, "-U", "true"))
	if control["helper.exit"] != "0" {
		skipOrFail(t, "userns", "unconfined `unshare -U true` fails here, so the test proves nothing: %s", stderr)
	}
	confined, stderr := runHelperProcess(t, f.config(true, unshare, "-U", "true"))
	if confined["helper.exit"] == "0" {
		t.Fatalf("confined `unshare -U true` succeeded")
	}
	if !strings.Contains(stderr, "Operation not permitted") {
		t.Errorf("confined `unshare -U true` failed (exit %s) without EPERM: %s", confined["helper.exit"], stderr)
	}
}

// TestInstallThreadNeedsNoNewPrivs checks InstallThread refuses a thread
// without no_new_privs (even though this root process could load a filter).
func TestInstallThreadNeedsNoNewPrivs(t *testing.T) {
	f, err := Workload()
	if err != nil {
		t.Fatal(err)
	}
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 0 {
		t.Skipf("this test process already runs with no_new_privs=%d (%v)", nnp, err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: should the filter load, the thread dies
		errc <- f.InstallThread()
	}()
	err = <-errc
	if !errors.Is(err, ErrNoNewPrivs) {
		t.Fatalf("InstallThread without no_new_privs: got %v, want ErrNoNewPrivs", err)
	}
}

func TestLandlockABI(t *testing.T) {
	abi := LandlockABI()
	if abi < 1 {
		skipOrFail(t, "landlock", "Landlock is not available on this kernel")
	}
	if handledFS(abi)&fsReadExec != fsReadExec {
		t.Errorf("ABI %d: handled rights %#x lack the read/execute rights", abi, handledFS(abi))
	}
	if abi >= 5 && handledFS(abi)&unix.LANDLOCK_ACCESS_FS_IOCTL_DEV == 0 {
		t.Errorf("ABI %d: IOCTL_DEV is not handled", abi)
	}
	if handledFS(abi+100) != handledFS(9) {
		t.Errorf("an ABI newer than this package knows should handle what the package knows")
	}
}
