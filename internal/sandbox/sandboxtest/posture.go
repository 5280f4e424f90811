package sandboxtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func postureCases() []testCase {
	return []testCase{
		{name: "identity", needs: []need{needShell}, run: testIdentity},
		{name: "processes", needs: []need{needShell}, run: testProcesses},
		{name: "host_files", run: testHostFiles},
		{name: "mount", needs: []need{needShell}, run: testMount},
		{name: "unshare", needs: []need{needShell}, run: testUnshare},
		{name: "ptrace", needs: []need{needShell}, run: testPtrace},
		{name: "raw_socket", needs: []need{needShell}, run: testRawSocket},
		{name: "hostname", needs: []need{needShell}, run: testHostname},
		{name: "agent_proc", needs: []need{needShell}, run: testAgentProc},
		{name: "no_agent_binary", needs: []need{needShell}, run: testNoAgentBinary},
		{name: "tiocsti", needs: []need{needShell}, run: testTIOCSTI},
		{name: "nosuid", needs: []need{needShell}, run: testNosuid},
		{name: "no_sys", needs: []need{needShell}, run: testNoSys},
		{name: "read_only_root", needs: []need{needShell}, run: testReadOnlyRoot},
		{name: "dev", needs: []need{needShell}, run: testDev},
		{name: "host_identity", needs: []need{needShell}, run: testHostIdentity},
	}
}

func testIdentity(t *testing.T, e *env) {
	if got := e.shOK(t, "id -u; id -g; id -G"); got != "1000\n1000\n1000\n" {
		t.Errorf("id -u, -g, -G: %q, want uid 1000, gid 1000 and no other group", got)
	}
	status := procStatus(e.shOK(t, "cat /proc/self/status"))
	for key, want := range map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	} {
		if status[key] != want {
			t.Errorf("/proc/self/status %s: %q, want %q", key, status[key], want)
		}
	}
	if uids := strings.Fields(status["Uid"]); len(uids) != 4 || slices.ContainsFunc(uids, func(u string) bool { return u != "1000" }) {
		t.Errorf("/proc/self/status Uid: %q, want 1000 four times", status["Uid"])
	}
}

// procStatus parses /proc/<pid>/status.
func procStatus(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// testProcesses: the sandbox sees its own processes and nothing of the
// host's. A driver's in-sandbox agent may show as PID 1 (its name only;
// testAgentProc checks that nothing else of it can be read).
func testProcesses(t *testing.T, e *env) {
	o := e.run(t, sandbox.ExecRequest{Argv: []string{"ps", "-e", "-o", "pid=,args="}})
	expectExit(t, "ps -e", o, 0)
	for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if !strings.Contains(line, "ps -e") && !(f[0] == "1" && strings.HasPrefix(f[1], "airlock-agent")) {
			t.Errorf("ps -e in a fresh sandbox shows a process that is neither itself nor the agent: %q\n%s", line, o.stdout)
		}
	}
	hostPid := os.Getpid()
	got := e.pythonOK(t, fmt.Sprintf(`
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(os.getpid(), [p for p in pids if p not in (1, os.getpid())], os.path.exists("/proc/%d"))
`, hostPid))
	var self int
	if _, err := fmt.Sscan(got, &self); err != nil {
		t.Fatalf("parse %q: %v", got, err)
	}
	if want := fmt.Sprintf("%d [] False\n", self); got != want {
		t.Errorf("/proc inside lists %q; want nothing but the process itself and PID 1 (%q), and no host pid %d", got, want, hostPid)
	}
}

// hostCanary is a file on the host that no sandbox may reach.
type hostCanary struct {
	dir, path, name, content string
}

func newHostCanary(t *testing.T) hostCanary {
	t.Helper()
	c := hostCanary{dir: t.TempDir(), name: randomToken("canary-"), content: randomToken("host-secret-")}
	c.path = filepath.Join(c.dir, c.name)
	if err := os.WriteFile(c.path, []byte(c.content+"\n"), 0o644); err != nil {
		t.Fatalf("write the host canary: %v", err)
	}
	// World-readable all the way, so that only isolation keeps it out.
	for d := c.dir; d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o005); err == nil {
				t.Cleanup(func() { _ = os.Chmod(d, fi.Mode().Perm()) })
			}
		}
	}
	return c
}

func testHostFiles(t *testing.T, e *env) {
	t.Run("shadow", func(t *testing.T) {
		o := e.run(t, e.w.ReadFiles("/etc/shadow"))
		expectFail(t, "cat /etc/shadow", o)
	})
	t.Run("root_and_home", func(t *testing.T) {
		for _, dir := range []string{"/root", "/home"} {
			host, _ := os.ReadDir(dir)
			o := e.run(t, e.w.ListDir(dir))
			for _, ent := range host {
				if slices.Contains(strings.Fields(o.stdout), ent.Name()) {
					t.Errorf("the host's %s/%s is visible inside: ls -A %s printed %q", dir, ent.Name(), dir, o.stdout)
				}
			}
		}
	})
	t.Run("canary", func(t *testing.T) {
		c := newHostCanary(t)
		for _, p := range []string{c.path, "/proc/self/root" + c.path, "/proc/1/root" + c.path, "/proc/self/cwd/../../../../.." + c.path} {
			o := e.run(t, e.w.ReadFiles(p))
			if o.res.ExitCode == 0 || strings.Contains(o.stdout, c.content) {
				t.Errorf("the host canary is readable inside at %s: %s", p, o)
			}
		}
		o := e.run(t, e.w.ListDir(c.dir))
		expectFail(t, "ls of the canary's host directory", o)
		req := e.w.Search(c.name, c.content, "/tmp", "/workspace", "/root", "/home", "/mnt", "/run", "/var", "/opt", "/srv", "/etc", "/dev/shm")
		req.Timeout = 30 * time.Second
		o = e.run(t, req)
		expectExit(t, "search for the canary", o, 0)
		if strings.TrimSpace(o.stdout) != "" {
			t.Errorf("the host canary is reachable inside: %s", o.stdout)
		}
	})
}

func testMount(t *testing.T, e *env) {
	for _, script := range []string{
		"mkdir -p /tmp/x && mount -t tmpfs none /tmp/x",
		"mount --bind /tmp /workspace",
		"mount -o remount,rw /",
		"mount -t proc proc /tmp",
	} {
		expectFail(t, script, e.sh(t, script))
	}
	for _, m := range e.mountTable(t) {
		if m.Point == "/tmp/x" {
			t.Errorf("a mount at /tmp/x appeared: %+v", m)
		}
	}
}

func testUnshare(t *testing.T, e *env) {
	for _, argv := range [][]string{
		{"unshare", "-U", "true"},
		{"unshare", "-r", "true"},
		{"unshare", "-m", "true"},
		{"unshare", "-n", "true"},
		{"unshare", "-p", "-f", "true"},
	} {
		o := e.run(t, sandbox.ExecRequest{Argv: argv})
		expectFail(t, strings.Join(argv, " "), o)
	}
}

func testPtrace(t *testing.T, e *env) {
	hostPid := os.Getpid()
	// PTRACE_ATTACH is 16, PTRACE_SEIZE 0x4206.
	out := e.pythonOK(t, fmt.Sprintf(`
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
for pid in (%d, 1):
    for req in (16, 0x4206):
        r = libc.ptrace(req, pid, None, None)
        print(pid, req, "attached" if r == 0 else "refused", ctypes.get_errno())
print("proc", os.path.exists("/proc/%d"))
`, hostPid, hostPid))
	if strings.Contains(out, "attached") {
		t.Errorf("ptrace attached to a process outside the workload:\n%s", out)
	}
	if !strings.Contains(out, "proc False") {
		t.Errorf("/proc/%d (the test process) exists inside:\n%s", hostPid, out)
	}
}

func testRawSocket(t *testing.T, e *env) {
	out := e.pythonOK(t, `
import socket
for name, args in [("raw icmp", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                   ("raw tcp", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)),
                   ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0x0300))]:
    try:
        socket.socket(*args).close()
        print(name, "opened")
    except OSError as e:
        print(name, "refused", e.errno)
`)
	if strings.Contains(out, "opened") || strings.Count(out, "refused") != 3 {
		t.Errorf("raw sockets:\n%s", out)
	}
}

func testHostname(t *testing.T, e *env) {
	before, err := os.Hostname()
	if err != nil {
		t.Fatalf("host name: %v", err)
	}
	inside := strings.TrimSpace(e.shOK(t, "hostname"))
	if inside == before {
		t.Errorf("the sandbox sees the host's name %q: it needs a UTS namespace of its own", before)
	}
	evil := randomToken("evil-")
	o := e.sh(t, "hostname "+evil+"; echo rc=$?; hostname")
	after, err := os.Hostname()
	if err != nil {
		t.Fatalf("host name: %v", err)
	}
	if after != before {
		t.Errorf("the host's name changed from %q to %q", before, after)
	}
	if !strings.Contains(o.stdout, "rc=0") && strings.Contains(o.stdout, evil) {
		t.Errorf("hostname failed but the name changed anyway: %s", o)
	}
}

func testAgentProc(t *testing.T, e *env) {
	for _, script := range []string{
		"cat /proc/1/environ",
		"head -c 1 /proc/1/mem",
		"python3 -c 'f = open(\"/proc/1/mem\", \"rb\"); f.seek(4096); f.read(16)'",
		"echo x > /proc/1/exe",
		"readlink /proc/1/exe",
		"ls /proc/1/root/",
		"ls /proc/1/fd/",
		"kill -0 1",
		"kill -STOP 1",
		"cat /proc/1/maps",
	} {
		o := e.sh(t, script)
		expectFail(t, script, o)
	}
}

func testNoAgentBinary(t *testing.T, e *env) {
	o := e.run(t, sandbox.ExecRequest{
		Argv:    []string{"sh", "-c", "find / -path /proc -prune -o -name 'airlock*' -print 2>/dev/null; find / -xdev -name 'airlock*' 2>/dev/null; true"},
		Timeout: 30 * time.Second,
	})
	expectExit(t, "find the agent", o, 0)
	if strings.TrimSpace(o.stdout) != "" {
		t.Errorf("files named airlock* are inside the sandbox:\n%s", o.stdout)
	}
}

func testTIOCSTI(t *testing.T, e *env) {
	out := e.pythonOK(t, `
import errno, fcntl, os, termios
try:
    master, slave = os.openpty()
    fd, where = slave, "pty"
    try:
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    except OSError:
        pass
except OSError as e:
    fd, where = 0, "stdin (no pty: %s)" % e
try:
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    print("injected on", where)
except OSError as e:
    print("refused on", where, errno.errorcode.get(e.errno, e.errno))
`)
	if !strings.HasPrefix(out, "refused on") || !strings.Contains(out, "EPERM") {
		t.Errorf("TIOCSTI: want EPERM, got %q", out)
	}
}

func testNosuid(t *testing.T, e *env) {
	for _, m := range e.mountTable(t) {
		if slices.Contains(m.Options, "nosuid") {
			continue
		}
		// A bind of a single device node holds no program to run.
		if kind := strings.TrimSpace(e.shOK(t, "stat -c %F '"+m.Point+"'")); kind == "character special file" {
			continue
		}
		t.Errorf("mount %s is not nosuid: %+v", m.Point, m)
	}
	o := e.sh(t, "su -c id root < /dev/null")
	if o.res.ExitCode == 0 || strings.Contains(o.stdout, "uid=0") {
		t.Errorf("su ran something: %s", o)
	}
	out := e.pythonOK(t, `
import os
for f in (os.setuid, os.seteuid, os.setgid):
    try:
        f(0)
        print("became 0 via", f.__name__)
    except OSError:
        pass
print(os.getuid(), os.geteuid())
`)
	if out != "1000 1000\n" {
		t.Errorf("changing to uid 0: %q", out)
	}
}

func testNoSys(t *testing.T, e *env) {
	if got := e.shOK(t, "if test -e /sys; then echo present; ls /sys; else echo absent; fi"); got != "absent\n" {
		t.Errorf("/sys inside: %q, want it absent", got)
	}
}

func testReadOnlyRoot(t *testing.T, e *env) {
	for _, script := range []string{
		"touch /usr/airlock-test",
		"touch /usr/bin/airlock-test",
		"touch /airlock-test",
		"mkdir /airlock-test",
		"touch /etc/airlock-test",
		"echo x >> /etc/passwd",
		"rm -f /etc/hostname",
		"touch /dev/airlock-test",
		"echo h > /proc/sysrq-trigger",
		"echo 1 > /proc/sys/kernel/ns_last_pid",
	} {
		expectFail(t, script, e.sh(t, script))
	}
	if out := e.shOK(t, "test -e /airlock-test || test -e /usr/airlock-test || test -e /etc/airlock-test || echo none"); out != "none\n" {
		t.Errorf("a file appeared on the read-only root: %q", out)
	}
}
