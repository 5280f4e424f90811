package packaging

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// testVersion is the version the test's package carries.
const testVersion = "0.0.0~test"

// installed lists where the package puts its files, as the README's "Run
// as a service" says: path, kind, mode (0 for a symlink: its target).
var installed = []struct {
	path   string
	mode   os.FileMode
	target string
}{
	{path: "/usr/lib/airlock/airlock", mode: 0o755},
	{path: "/usr/lib/airlock/airlock-full", mode: 0o755},
	{path: "/usr/bin/airlock", target: "../lib/airlock/airlock"},
	{path: "/usr/lib/systemd/system/airlock.service", mode: 0o644},
	{path: "/etc/airlock", mode: os.ModeDir | 0o755},
	{path: "/etc/airlock/config.toml", mode: 0o640},
	{path: "/var/lib/airlock", mode: os.ModeDir | 0o700},
	{path: "/usr/share/man/man1/airlock.1.gz", mode: 0o644},
	{path: "/usr/share/man/man1/airlock-serve.1.gz", mode: 0o644},
	{path: "/usr/share/doc/airlock/copyright", mode: 0o644},
	{path: "/usr/share/doc/airlock/README.md.gz", mode: 0o644},
	{path: "/usr/share/doc/airlock/examples/config.toml", mode: 0o644},
	{path: "/usr/share/doc/airlock/examples/policies/safe-defaults.toml", mode: 0o644},
}

// TestDebianPackage builds the package, installs it with dpkg into a fresh
// Debian 12 root, checks where its files land, has systemd-analyze verify
// and score the unit, runs the unit's ExecStart from the installed tree
// with the installed config (as the unit would, see bwrapArgs), creates a
// sandbox through it and runs a command, and purges the package.
func TestDebianPackage(t *testing.T) {
	testcap.Require(t, "root", "userns", "bwrap", "debroot")
	requireCgroups(t)
	deb := buildDeb(t)
	root := freshRoot(t)

	// Install.
	copyFile(t, deb, filepath.Join(root, "tmp", "airlock.deb"))
	out := chroot(t, root, "dpkg", "-i", "/tmp/airlock.deb")
	t.Logf("dpkg -i:\n%s", out)
	if status := chroot(t, root, "dpkg-query", "-W", "-f=${Status} ${Version}", "airlock"); status != "install ok installed "+testVersion {
		t.Fatalf("dpkg-query: %q", status)
	}
	for _, f := range installed {
		fi, err := os.Lstat(filepath.Join(root, f.path))
		switch {
		case err != nil:
			t.Errorf("%s: %v", f.path, err)
		case f.target != "":
			if got, _ := os.Readlink(filepath.Join(root, f.path)); got != f.target {
				t.Errorf("%s: a link to %q, want %q", f.path, got, f.target)
			}
		case fi.Mode()&(os.ModeType|os.ModePerm) != f.mode:
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	if v := chroot(t, root, "airlock", "--version"); !strings.Contains(v, testVersion) {
		t.Errorf("airlock --version: %q", v)
	}
	if ok := chroot(t, root, "airlock", "serve", "--check-config", "--config", "/etc/airlock/config.toml"); !strings.Contains(ok, ": ok") {
		t.Errorf("the installed config does not check: %q", ok)
	}

	// The unit, as systemd reads it.
	unitPath := "/usr/lib/systemd/system/airlock.service"
	if out, err := exec.Command("systemd-analyze", "verify", "--man=no", "--root="+root, unitPath).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	score := securityScore(t, root)
	t.Logf("systemd-analyze security: airlock.service exposure %.1f (0 best, 10 worst)", score)
	// A change that loosens the unit shows here.
	if score > 5 {
		t.Errorf("exposure %.1f: the unit is less hardened than it was (4.9 when this test was written); harden it or raise this bound on purpose", score)
	}

	// Run the unit's ExecStart from the installed tree with the installed
	// config, changed only in the port (as an operator would edit it).
	port := freePort(t)
	cfgPath := filepath.Join(root, "etc/airlock/config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("listen = \"127.0.0.1:%d\"", port)
	edited := strings.Replace(string(cfg), "#listen = \"127.0.0.1:7070\"", listen, 1)
	if edited == string(cfg) {
		t.Fatal("the installed config has no #listen line to edit")
	}
	if err := os.WriteFile(cfgPath, []byte(edited), 0o640); err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(chrootStdout(t, root, "airlock", "keys", "create", "--state-dir", "/var/lib/airlock", "--role", "operator"))

	u := readUnit(t, filepath.Join(root, unitPath))
	// /run/airlock is the host's: its locks tell the daemon which sandboxes
	// are alive; a private one would make it sweep every other airlock's
	// sandboxes on this host as stale.
	if err := os.MkdirAll("/run/airlock", 0o711); err != nil {
		t.Fatal(err)
	}
	d := startService(t, bwrapArgs(t, u, root, "/run/airlock"))
	waitListening(t, d, port)

	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port), secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create a sandbox through the installed daemon: %v\n%s", err, d.log())
	}
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo hello from $(id -u); cat /etc/debian_version"}})
	if err != nil {
		t.Fatalf("exec: %v\n%s", err, d.log())
	}
	wantVersion, _ := os.ReadFile(filepath.Join(root, "etc/debian_version"))
	if res.ExitCode != 0 || string(res.Stdout) != "hello from 1000\n"+string(wantVersion) {
		t.Fatalf("exec: %+v stdout %q stderr %q", res.Result, res.Stdout, res.Stderr)
	}
	t.Logf("sandbox %s ran a command through the installed daemon: %q", sb.ID, res.Stdout)
	checkHidden(ctx, t, c, sb.ID, root)
	// The audit log's key is in a directory of its own, not beside the log.
	if st, err := os.Stat(filepath.Join(root, "var/lib/airlock-keys/audit.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the audit key in /var/lib/airlock-keys: %v %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/airlock/audit.key")); err == nil {
		t.Error("the audit key is in the state directory, beside the log")
	}

	// Stop as systemd does: SIGTERM; the daemon lets go of its sandboxes
	// (they outlive it) and exits. This one is deleted first: nothing of
	// it may stay on the host.
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Errorf("delete the sandbox: %v", err)
	}
	d.stop(t)
	if !strings.Contains(d.log(), "shutting down") {
		t.Errorf("no shutdown in the log:\n%s", d.log())
	}

	// Purge: the files go, the records stay (postrm says so).
	out = chroot(t, root, "dpkg", "--purge", "airlock")
	t.Logf("dpkg --purge:\n%s", out)
	for _, p := range []string{"/usr/lib/airlock", "/usr/bin/airlock", "/etc/airlock", unitPath} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s is left after purge", p)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/airlock/airlock.db")); err != nil {
		t.Errorf("purge removed the registry: %v", err)
	}
}

// hiddenScript looks, from inside a sandbox, for the airlock that runs it
// and its data: by name, on PATH, and by content (every file of the
// binary's size is hashed). It prints only "checked" when it finds none.
const hiddenScript = `size=$1 sum=$2
for p in /usr/lib/airlock/airlock /usr/share/doc/airlock/copyright /etc/airlock /var/lib/airlock /run/airlock; do
	[ -e "$p" ] && echo "visible: $p"
done
for d in /usr/lib/airlock /usr/share/doc/airlock; do
	[ -z "$(ls -A "$d" 2>/dev/null)" ] || echo "not empty: $d"
done
command -v airlock >/dev/null 2>&1 && echo "on PATH: $(command -v airlock)"
find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -size "${size}c" -print 2>/dev/null |
while read -r f; do
	[ "$(sha256sum < "$f" | cut -d" " -f1)" = "$sum" ] && echo "found: $f"
done
echo checked
`

// checkHidden runs hiddenScript in sandbox id: a sandbox must not find the
// airlock binary installed in root, nor its data.
func checkHidden(ctx context.Context, t *testing.T, c *client.Client, id, root string) {
	t.Helper()
	bin, err := os.ReadFile(filepath.Join(root, "usr/lib/airlock/airlock"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	// The sandbox's own timeout (an exec may not ask for more).
	res, err := c.Exec(ctx, id, client.ExecRequest{
		Argv: []string{"sh", "-c", hiddenScript, "sh", strconv.Itoa(len(bin)), hex.EncodeToString(sum[:])},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "checked\n" {
		t.Errorf("sandbox %s finds airlock: exit %d, %q %q", id, res.ExitCode, res.Stdout, res.Stderr)
	}
}

// requireCgroups skips (or fails) unless cgroup v1 or v2 works: the
// sandbox the test makes needs one.
func requireCgroups(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if hostcap.Probe(ctx, "cgroupv1").OK {
		testcap.Require(t, "cgroupv1")
		return
	}
	testcap.Require(t, "cgroupv2")
}

// The package is built once per test binary, into debDir.
var (
	debOnce sync.Once
	debPath string
	debErr  error
	debDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if debDir != "" {
		os.RemoveAll(debDir)
	}
	os.Exit(code)
}

// buildDeb builds airlock (with the agent `make agent` put in place) and
// packs it with build-deb.sh, as make deb does.
func buildDeb(t *testing.T) string {
	t.Helper()
	debOnce.Do(func() { debPath, debErr = makeDeb() })
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debPath
}

func makeDeb() (string, error) {
	top, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(top, "internal/agentbin/bin/airlock-agent")); err != nil {
		return "", fmt.Errorf("the agent is not built (run make agent; make test does): %w", err)
	}
	if debDir, err = os.MkdirTemp("", "airlock-deb-"); err != nil {
		return "", err
	}
	// The front and the complete airlock, side by side as make build
	// leaves them.
	for _, b := range []struct{ out, pkg string }{{"airlock", "./cmd/airlock"}, {"airlock-full", "./cmd/airlock-full"}} {
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-X github.com/airlock-sandbox/airlock/internal/cli.Version="+testVersion, "-o", filepath.Join(debDir, b.out), b.pkg)
		build.Dir = top
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(top, "packaging/build-deb.sh"), debDir, testVersion, debDir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build-deb.sh: %w\n%s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// chroot runs a command in root and returns its output; failing fails the test.
func chroot(t *testing.T, root string, argv ...string) string {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "DEBIAN_FRONTEND=noninteractive"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// chrootStdout is chroot, returning only standard output.
func chrootStdout(t *testing.T, root string, argv ...string) string {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return string(out)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var scoreRE = regexp.MustCompile(`Overall exposure level for airlock\.service: ([0-9.]+)`)

// securityScore is systemd-analyze security's exposure of the installed
// unit (0 to 10; lower is better).
func securityScore(t *testing.T, root string) float64 {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--root="+root, "--no-pager", "airlock.service").CombinedOutput()
	m := scoreRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	t.Logf("systemd-analyze security:\n%s", out)
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return score
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// service is the daemon started from the unit's ExecStart.
type service struct {
	cmd  *exec.Cmd
	pid  int // the daemon's, inside bwrap
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
	err  error
}

func (s *service) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

func startService(t *testing.T, bwrap []string) *service {
	t.Helper()
	s := &service{cmd: exec.Command("bwrap", bwrap...), done: make(chan struct{})}
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = pw, pw
	info, infoW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.ExtraFiles = []*os.File{infoW} // bwrap --info-fd 3
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	infoW.Close()
	var child struct {
		Pid int `json:"child-pid"`
	}
	err = json.NewDecoder(info).Decode(&child)
	info.Close()
	if err != nil || child.Pid == 0 {
		_ = s.cmd.Process.Kill()
		t.Fatalf("bwrap did not say its child's pid: %v", err)
	}
	s.pid = child.Pid
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
	}()
	go func() {
		s.err = s.cmd.Wait()
		pw.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(s.pid, syscall.SIGKILL)
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("daemon log:\n%s", s.log())
		}
	})
	return s
}

func waitListening(t *testing.T, s *service, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			t.Fatalf("the daemon exited: %v\nbwrap %s\n%s", s.err, strings.Join(s.cmd.Args[1:], " "), s.log())
		default:
		}
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the daemon did not listen on %d:\n%s", port, s.log())
}

// stop sends SIGTERM to the daemon, as systemd does, and waits for it.
func (s *service) stop(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.done:
		if s.err != nil {
			t.Errorf("the daemon after SIGTERM: %v", s.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not stop within TimeoutStopSec (30 s) of SIGTERM:\n%s", s.log())
	}
}
