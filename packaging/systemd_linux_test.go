package packaging

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/runsc"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// bootScript starts systemd as PID 1 of a container made of the Debian
// root $1, in the cgroup subtree $2 of every hierarchy: new cgroup, mount,
// pid, UTS and IPC namespaces (the network is the host's, so the test
// reaches the API on loopback), the root's own /proc, /sys read-only, a
// fresh cgroup tree of the subtree (cgroup v1 hybrid, as systemd-nspawn
// mounts it), a small /dev, and the host's /run/airlock (its locks and uid
// ranges, shared with every airlock on the host) and /opt/airlock (runsc).
const bootScript = `set -e
root=$1 cg=$2
for c in /sys/fs/cgroup/*; do
	[ -e "$c/cgroup.procs" ] || continue
	mkdir -p "$c/$cg"
	if [ -e "$c/cpuset.cpus" ]; then
		cat "$c/cpuset.cpus" > "$c/$cg/cpuset.cpus"
		cat "$c/cpuset.mems" > "$c/$cg/cpuset.mems"
	fi
	echo $$ > "$c/$cg/cgroup.procs"
done
exec unshare --cgroup --mount --pid --uts --ipc --fork --kill-child --propagation private /bin/sh -c '
set -e
root=$1
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount -t tmpfs -o mode=755 tmpfs "$root/sys/fs/cgroup"
for c in /sys/fs/cgroup/*; do
	name=${c##*/}
	opts=$(awk -v m="$c" "\$5 == m { split(\$0, a, \" - \"); split(a[2], b, \" \"); print b[1], b[3] }" /proc/self/mountinfo)
	mkdir "$root/sys/fs/cgroup/$name"
	case $opts in
	cgroup2*) mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup/$name" ;;
	cgroup*) mount -t cgroup -o "$(echo "$opts" | sed "s/^cgroup rw,//")" cgroup "$root/sys/fs/cgroup/$name" ;;
	esac
done
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for d in null zero full random urandom tty; do
	touch "$root/dev/$d"
	mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p /run/airlock "$root/run/airlock"
mount --bind /run/airlock "$root/run/airlock"
if [ -d /opt/airlock ]; then
	mkdir -p "$root/opt/airlock"
	mount --bind -o ro /opt/airlock "$root/opt/airlock"
fi
mount -t tmpfs tmpfs "$root/tmp"
cd "$root"
mkdir -p .oldroot
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
exec env -i container=airlock-test /lib/systemd/systemd --log-target=console systemd.unit=multi-user.target
' sh "$root"
`

// container is systemd running as PID 1 in a Debian root.
type container struct {
	cmd    *exec.Cmd
	pid    int    // systemd's, on the host
	cgroup string // the subtree of every hierarchy
	done   chan struct{}
	log    *strings.Builder
}

// boot starts systemd in root and waits until it has booted.
func boot(t *testing.T, root string) *container {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &container{cgroup: "airlock-systemd-test-" + hex.EncodeToString(b[:]), done: make(chan struct{}), log: &strings.Builder{}}
	c.cmd = exec.Command("/bin/sh", "-c", bootScript, "sh", root, c.cgroup)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { c.destroy(t) })
	// unshare --fork: systemd is the one child of the unshare process.
	deadline := time.Now().Add(30 * time.Second)
	for c.pid == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("systemd did not start:\n%s", c.log)
		}
		select {
		case <-c.done:
			t.Fatalf("the container's start failed:\n%s", c.log)
		case <-time.After(50 * time.Millisecond):
		}
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.cmd.Process.Pid, c.cmd.Process.Pid))
		if f := strings.Fields(string(kids)); len(f) == 1 {
			comm, _ := os.ReadFile("/proc/" + f[0] + "/comm")
			if strings.TrimSpace(string(comm)) == "systemd" {
				c.pid, _ = strconv.Atoi(f[0])
			}
		}
	}
	for {
		out, _ := c.exec("systemctl", "is-system-running")
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			if state == "degraded" {
				failed, _ := c.exec("systemctl", "--no-pager", "--failed")
				t.Logf("systemd booted degraded (units of the Debian root that need hardware):\n%s", failed)
			}
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd did not boot (state %q):\n%s", state, c.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs a command in the container's namespaces.
func (c *container) exec(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(c.pid), "-a", "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "SYSTEMD_PAGER="}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *container) must(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := c.exec(argv...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

// destroy powers the container off (SIGRTMIN+4 to systemd), kills what is
// left after 20 s, and removes its cgroups.
func (c *container) destroy(t *testing.T) {
	if c.pid != 0 {
		_ = syscall.Kill(c.pid, syscall.Signal(34+4)) // SIGRTMIN+4: poweroff
	} else {
		_ = c.cmd.Process.Kill() // unshare --kill-child takes systemd along
	}
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Errorf("systemd did not power off within 20 s; killing the container")
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, h := range hierarchies() {
		top := filepath.Join(h, c.cgroup)
		for {
			err := removeTree(top)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("remove the container's cgroup %s: %v", top, err)
				}
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func hierarchies() []string {
	ents, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = filepath.Dir(e)
	}
	return out
}

// removeTree removes a cgroup and every cgroup below it, deepest first.
func removeTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && err != syscall.ENOENT {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	return nil
}

// TestSystemdService installs the package into a Debian root, boots
// systemd in it, and does what an operator does: make a key, `systemctl
// enable --now airlock`, create sandboxes (native, and gVisor when runsc
// is here) through the API, see the journal, have systemd restart the
// daemon after it is killed, and stop it: the unit as it is, every
// hardening setting applied by systemd itself.
func TestSystemdService(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "debroot")
	if _, err := os.Stat("/sys/fs/cgroup/systemd/cgroup.procs"); err != nil {
		t.Skip("the container of this test is made for cgroup v1 hosts with a name=systemd hierarchy (hybrid), as CI has")
	}
	deb := buildDeb(t)
	root := freshRoot(t)
	copyFile(t, deb, filepath.Join(root, "tmp", "airlock.deb"))
	chroot(t, root, "dpkg", "-i", "/tmp/airlock.deb")
	port := freePort(t)
	cfgPath := filepath.Join(root, "etc/airlock/config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(cfg), "#listen = \"127.0.0.1:7070\"", fmt.Sprintf("listen = \"127.0.0.1:%d\"", port), 1)
	// The gVisor driver too, when this host has the runsc make runsc builds
	// (the container binds /opt/airlock).
	gvisor := hostcap.Probe(context.Background(), "runsc").OK && strings.HasPrefix(runscPath(), "/opt/airlock/")
	if gvisor {
		edited += "\n[[template]]\nname = \"default\"\n\n[[template]]\nname = \"gvisor\"\ndriver = \"gvisor\"\n"
	}
	if err := os.WriteFile(cfgPath, []byte(edited), 0o640); err != nil {
		t.Fatal(err)
	}

	c := boot(t, root)
	secret := strings.TrimSpace(chrootStdout(t, root, "airlock", "keys", "create", "--state-dir", "/var/lib/airlock", "--role", "operator"))
	c.must(t, "systemctl", "enable", "--now", "airlock")
	if out := c.must(t, "systemctl", "is-enabled", "airlock"); strings.TrimSpace(out) != "enabled" {
		t.Fatalf("is-enabled: %q", out)
	}
	waitActive(t, c)
	waitPort(t, port)
	cl, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(template string) string {
		t.Helper()
		sb, err := cl.CreateSandbox(ctx, client.CreateRequest{Template: template})
		if err != nil {
			journal, _ := c.exec("journalctl", "-u", "airlock", "--no-pager")
			t.Fatalf("create a %q sandbox under systemd: %v\n%s", template, err, journal)
		}
		res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo hello from $(id -u)"}})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello from 1000\n" {
			journal, _ := c.exec("journalctl", "-u", "airlock", "--no-pager")
			t.Fatalf("exec in the %q sandbox: %v %+v %q %q\n%s", template, err, res, res.Stdout, res.Stderr, journal)
		}
		t.Logf("%s sandbox %s under systemd: %q", template, sb.ID, res.Stdout)
		checkHidden(ctx, t, cl, sb.ID, root)
		return sb.ID
	}
	native := run("default")
	if gvisor {
		run("gvisor")
	}
	if out := c.must(t, "journalctl", "-u", "airlock", "--no-pager"); !strings.Contains(out, "sandbox created") {
		t.Errorf("the journal lacks the daemon's log:\n%s", out)
	}

	// Restart=on-failure: a daemon killed with SIGKILL comes back, and
	// takes its sandbox up again: sandboxes outlive their daemon.
	mainPID := strings.TrimSpace(c.must(t, "systemctl", "show", "-P", "MainPID", "airlock"))
	c.must(t, "systemctl", "kill", "--signal=KILL", "--kill-who=main", "airlock")
	deadline := time.Now().Add(30 * time.Second)
	for {
		pid := strings.TrimSpace(c.must(t, "systemctl", "show", "-P", "MainPID", "airlock"))
		state, _ := c.exec("systemctl", "is-active", "airlock")
		if pid != "0" && pid != mainPID && strings.TrimSpace(state) == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("systemd did not restart the killed daemon (main pid %s, state %s)", pid, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitPort(t, port)
	if sb, err := cl.GetSandbox(ctx, native); err != nil || sb.State != "running" {
		t.Errorf("after the restart, sandbox %s: %+v, %v; want running", native, sb, err)
	}
	if res, err := cl.Exec(ctx, native, client.ExecRequest{Argv: []string{"echo", "again"}}); err != nil || string(res.Stdout) != "again\n" {
		t.Errorf("exec in sandbox %s after the restart: %v %+v", native, err, res)
	}
	last := native

	// Stop: the daemon lets go of its sandboxes, and systemd of the daemon
	// only (KillMode=process): the sandbox runs on, and the next start
	// takes it up again. airlock reap, with the unit stopped, ends it:
	// nothing of it is left on the host.
	procs := func() string {
		var out []string
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/pids", c.cgroup, "airlock", last), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				out = append(out, strings.Fields(string(b))...)
			}
			return nil
		})
		return strings.Join(out, " ")
	}
	if procs() == "" {
		t.Fatalf("sandbox %s has no processes in /sys/fs/cgroup/pids/%s/airlock/%s before the stop", last, c.cgroup, last)
	}
	c.must(t, "systemctl", "stop", "airlock")
	if out, _ := c.exec("systemctl", "is-active", "airlock"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("after stop: %q", out)
	}
	if procs() == "" {
		t.Errorf("sandbox %s has no processes after the daemon's stop: it should outlive it", last)
	}
	c.must(t, "systemctl", "start", "airlock")
	waitActive(t, c)
	waitPort(t, port)
	if res, err := cl.Exec(ctx, last, client.ExecRequest{Argv: []string{"echo", "after a stop"}}); err != nil || string(res.Stdout) != "after a stop\n" {
		t.Errorf("exec in sandbox %s after a stop and a start: %v %+v", last, err, res)
	}
	c.must(t, "systemctl", "stop", "airlock")
	c.must(t, "airlock", "reap", "--state-dir", "/var/lib/airlock")
	if p := procs(); p != "" {
		t.Errorf("sandbox %s still has processes after airlock reap: %s", last, p)
	}
	if out := c.must(t, "journalctl", "-u", "airlock", "--no-pager"); !strings.Contains(out, "shutting down") {
		t.Errorf("the journal does not show the daemon's shutdown:\n%s", out)
	}
}

// runscPath is the runsc airlock would use here, "" when none.
func runscPath() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := runsc.Find(ctx)
	if err != nil {
		return ""
	}
	return r.Path
}

func waitPort(t *testing.T, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %d after 30 s", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitActive(t *testing.T, c *container) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := c.exec("systemctl", "is-active", "airlock")
		switch strings.TrimSpace(out) {
		case "active":
			return
		case "failed":
			journal, _ := c.exec("journalctl", "-u", "airlock", "--no-pager")
			t.Fatalf("airlock.service failed:\n%s", journal)
		}
		if time.Now().After(deadline) {
			journal, _ := c.exec("journalctl", "-u", "airlock", "--no-pager")
			t.Fatalf("airlock.service is %q after 30 s:\n%s", out, journal)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
