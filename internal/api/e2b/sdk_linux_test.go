package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/api/e2b/sdktest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// This file runs the official E2B SDKs (e2b, @e2b/code-interpreter) and
// OpenAI's E2B sandbox client, from npm at the versions of
// sdktest/package-lock.json, against a real `airlock serve` with nothing
// but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at it.

// sdkDiskBytes is the workspace of the test's sandboxes: small, so that an
// upload past it is quick.
const sdkDiskBytes = 16 << 20

// sdkPool is the warm pool of the test's "pooled" template.
const sdkPool = 2

// npmInstall installs the SDKs (sdktest's lock file) unless they are.
func npmInstall(t *testing.T) string {
	t.Helper()
	start := time.Now()
	dir, err := sdktest.Install(context.Background())
	if err != nil {
		testcap.SkipOrFail(t, "node", "%v", err)
	}
	t.Logf("npm packages ready: %s", time.Since(start).Round(time.Millisecond))
	return dir
}

// built is airlock and its agent, built once per test binary.
var built struct {
	once      sync.Once
	dir       string
	err       error
	bin       string
	agentPath string
}

func buildAirlock(t *testing.T) (bin, agentPath string) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "airlock-e2b-bin-")
		if built.err != nil {
			return
		}
		repo, _ := filepath.Abs(filepath.Join("..", "..", ".."))
		for _, b := range []struct{ out, pkg string }{{"airlock-agent", "./cmd/airlock-agent"}, {"airlock", "./cmd/airlock-full"}} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(built.dir, b.out), b.pkg)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				built.err = fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
				return
			}
		}
		built.bin, built.agentPath = filepath.Join(built.dir, "airlock"), filepath.Join(built.dir, "airlock-agent")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin, built.agentPath
}

// daemon is a running `airlock serve`.
type daemon struct {
	url string
	// allowed and blocked are loopback servers of the test: the
	// "egress" template allows allowed's address, nothing allows blocked's.
	allowed, blocked string
	cmd              *exec.Cmd
	done             chan struct{}
	mu               sync.Mutex
	logs             bytes.Buffer
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

var (
	listenRE     = regexp.MustCompile(`msg=listening addr=(\S+)`)
	reattachedRE = regexp.MustCompile(`msg="sandbox reattached" sandbox_id=(\S+) state=(\S+)`)
)

// serveState is a state directory with two E2B keys and the test's
// config, for daemons to serve.
type serveState struct {
	bin, agentPath   string
	state, cfg, keys string
	key, other       string
	allowed, blocked string
}

// loopbackServer serves its name on 127.0.0.1 until the test ends and
// returns its address.
func loopbackServer(t *testing.T, name string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) }))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// startServe makes two E2B keys offline, then starts the daemon with the
// test's config (its templates on driver) and waits for it to listen; a
// stop of it ends its sandboxes.
func startServe(t *testing.T, driver string) (d *daemon, key, other string) {
	t.Helper()
	s := newServeState(t, driver)
	return s.launch(t, "--shutdown-sandboxes"), s.key, s.other
}

// newServeState makes the state directory, its keys and the config whose
// templates run on driver.
func newServeState(t *testing.T, driver string) *serveState {
	t.Helper()
	bin, agentPath := buildAirlock(t)
	dir := t.TempDir()
	s := &serveState{bin: bin, agentPath: agentPath, state: filepath.Join(dir, "state"), cfg: filepath.Join(dir, "config.toml"), keys: filepath.Join(dir, "keys")}
	newKey := func(name string) string {
		cmd := exec.Command(bin, "keys", "create", "--e2b", "--state-dir", s.state, "--name", name)
		cmd.Env = append(os.Environ(), "AIRLOCK_AGENT="+agentPath)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("airlock keys create --e2b: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	s.key, s.other = newKey("e2b-sdk"), newKey("other")
	s.allowed, s.blocked = loopbackServer(t, "allowed"), loopbackServer(t, "blocked")
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(s.key) {
		t.Fatalf("keys create --e2b printed %q, not a key the E2B SDKs accept", s.key)
	}
	err := os.WriteFile(s.cfg, []byte(fmt.Sprintf(`
[[template]]
name = "default"
driver = "%[3]s"
disk = "%[1]d"

[[template]]
name = "pooled"
driver = "%[3]s"
pool = %[2]d
home = "/home/user"

[[template]]
name = "egress"
driver = "%[3]s"

[template.network]
mode = "egress"
allow_addresses = ["%[4]s"]

[e2b]
templates = ["base=default", "code-interpreter-v1=default", "pooled=pooled", "egress=egress"]
`, sdkDiskBytes, sdkPool, driver, s.allowed)), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// launch starts a daemon on s with extra arguments and waits for it to
// listen. The test's end stops it and ends, with airlock reap, whatever
// sandboxes of s are left.
func (s *serveState) launch(t *testing.T, extra ...string) *daemon {
	t.Helper()
	d := &daemon{done: make(chan struct{}), allowed: s.allowed, blocked: s.blocked}
	d.cmd = exec.Command(s.bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", s.state,
		"--audit-key", filepath.Join(s.keys, "audit.key"), "--config", s.cfg}, extra...)...)
	d.cmd.Env = append(os.Environ(), "AIRLOCK_AGENT="+s.agentPath)
	pr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.logs.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_ = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("daemon log (last lines):\n%s", tail(d.log(), 60))
		}
		// Sandboxes outlive a daemon that stops without
		// --shutdown-sandboxes, or is killed: end what is left.
		cmd := exec.Command(s.bin, "reap", "--state-dir", s.state, "--audit-key", filepath.Join(s.keys, "audit.key"))
		cmd.Env = append(os.Environ(), "AIRLOCK_AGENT="+s.agentPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("airlock reap after the test: %v\n%s", err, out)
		}
	})
	select {
	case a := <-addr:
		d.url = "http://" + a
	case <-d.done:
		t.Fatalf("airlock serve exited: %s", d.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("airlock serve did not listen: %s", d.log())
	}
	return d
}

// health is the part of /healthz the test reads.
type health struct {
	Sandboxes int `json:"sandboxes"`
	Pools     []struct {
		Ready int `json:"ready"`
	} `json:"pools"`
}

func (d *daemon) health(t *testing.T) health {
	t.Helper()
	res, err := http.Get(d.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var h health
	if err := json.NewDecoder(res.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// goroutines reads the daemon's go_goroutines from /metrics.
func (d *daemon) goroutines(t *testing.T) int {
	t.Helper()
	res, err := http.Get(d.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^go_goroutines (\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no go_goroutines")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func (d *daemon) fds() int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	return len(ents)
}

// settled waits until only the pool's sandboxes live and it is full.
func (d *daemon) settled(t *testing.T) {
	t.Helper()
	d.settledWithin(t, 30*time.Second)
}

// settledWithin is settled with a deadline of its own: a microVM pool's
// first machines wait for their snapshot, made at the first start.
func (d *daemon) settledWithin(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		h := d.health(t)
		if h.Sandboxes == sdkPool && len(h.Pools) == 1 && h.Pools[0].Ready == sdkPool {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon still has %d sandboxes (pool %+v): the SDK tests left some alive", h.Sandboxes, h.Pools)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sdkResult is one line of sdktest/run.mjs.
type sdkResult struct {
	Test  string `json:"test"`
	OK    bool   `json:"ok"`
	MS    int64  `json:"ms"`
	Error string `json:"error"`
}

// TestSDKs drives airlock with the official E2B SDKs and OpenAI's E2B
// sandbox client (sdktest/*.test.mjs), one Go subtest per SDK test, then
// checks that nothing was left: no sandbox beyond the warm pool, and no
// more of the daemon's goroutines or file descriptors than before.
func TestSDKs(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock", "node", "jupyter")
	runSDKTests(t, "native", os.Getenv("AIRLOCK_E2B_ONLY"), 20)
}

// TestSDKsGVisor runs a part of the SDK tests on the gVisor driver:
// commands, files and a kernel in a gVisor sandbox's composed root.
func TestSDKsGVisor(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "runsc", "node", "jupyter")
	runSDKTests(t, "gvisor", "^(create with options|home|commands: (foreground|background|a 30 s)|network: (allowOut|updateNetwork)|files: text|pty|runCode: (create|values|a matplotlib|kill)|ports: )", 9)
}

// TestSDKsPauseGVisor: through the SDKs unchanged, a gVisor sandbox's
// kernel variable and background server survive sandbox.pause() and
// Sandbox.connect; one made with lifecycle onTimeout 'pause' is paused at
// its timeout, and with autoResume a command resumes it (pause.test.mjs).
func TestSDKsPauseGVisor(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "runsc", "node", "jupyter")
	dir := npmInstall(t)
	d, key, other := startServe(t, "gvisor")
	d.settled(t)
	times := filepath.Join(t.TempDir(), "times")
	if n := runNode(t, dir, d, nodeEnv{key: key, other: other, extra: []string{"AIRLOCK_E2B_TIMES=" + times}}, "pause.test.mjs"); n != 2 {
		t.Fatalf("node run.mjs reported %d tests, want 2", n)
	}
	if b, err := os.ReadFile(times); err == nil {
		t.Log(string(b))
	}
}

// TestSDKsPauseMicroVM: pause.test.mjs's kernel variable and background
// server on the microVM driver, whose default root has Debian's Jupyter
// kernel where the host has it. The lifecycle test is gVisor's only: its
// 5 s timeout is shorter than a kernel's start under emulation (TCG).
func TestSDKsPauseMicroVM(t *testing.T) {
	testcap.Require(t, "root", "cgroupv1", "qemu", "node", "jupyter")
	dir := npmInstall(t)
	d, key, other := startServe(t, "microvm")
	d.settledWithin(t, 5*time.Minute)
	times := filepath.Join(t.TempDir(), "times")
	if n := runNode(t, dir, d, nodeEnv{key: key, other: other, only: "^pause: ", extra: []string{"AIRLOCK_E2B_TIMES=" + times}}, "pause.test.mjs"); n != 1 {
		t.Fatalf("node run.mjs reported %d tests, want 1", n)
	}
	if b, err := os.ReadFile(times); err == nil {
		t.Log(string(b))
	}
}

func runSDKTests(t *testing.T, driver, only string, least int) {
	dir := npmInstall(t)
	d, key, other := startServe(t, driver)
	d.settled(t)
	g0, f0 := d.goroutines(t), d.fds()

	n := runNode(t, dir, d, nodeEnv{key: key, other: other, only: only}, "sdk.test.mjs", "interpreter.test.mjs", "agents.test.mjs", "ports.test.mjs")
	if n < least && os.Getenv("AIRLOCK_E2B_ONLY") == "" {
		t.Fatalf("node run.mjs reported %d tests, want at least %d", n, least)
	}

	d.settled(t)
	var g, f int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		g, f = d.goroutines(t), d.fds()
		if (g <= g0+5 && f <= f0+5) || time.Now().After(deadline) {
			break
		}
	}
	if g > g0+5 || f > f0+5 {
		t.Errorf("the daemon holds more than before the SDK tests: %d goroutines (%d before), %d file descriptors (%d before)", g, g0, f, f0)
	}
}

// nodeEnv is what a run of sdktest/run.mjs is given besides the daemon's
// URL.
type nodeEnv struct {
	key, other, only string
	// extra are more variables, NAME=value.
	extra []string
}

// runNode runs the SDK test files with sdktest/run.mjs against d, reports
// each test it printed as a subtest, and returns how many it printed; a
// run that fails (not a test) fails t.
func runNode(t *testing.T, dir string, d *daemon, e nodeEnv, files ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"run.mjs"}, files...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_KEY="+e.key, "E2B_API_URL="+d.url, "E2B_SANDBOX_URL="+d.url,
		"AIRLOCK_OTHER_KEY="+e.other, "AIRLOCK_DISK_BYTES="+strconv.Itoa(sdkDiskBytes),
		"AIRLOCK_E2B_RUN=go-"+strconv.Itoa(os.Getpid()),
		"AIRLOCK_E2B_ONLY="+e.only,
		"AIRLOCK_ALLOWED_ADDR="+d.allowed, "AIRLOCK_BLOCKED_ADDR="+d.blocked,
	)
	cmd.Env = append(cmd.Env, e.extra...)
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		var r sdkResult
		if json.Unmarshal([]byte(line), &r) != nil || r.Test == "" {
			continue
		}
		n++
		t.Run(r.Test, func(t *testing.T) {
			t.Logf("%d ms", r.MS)
			if !r.OK {
				t.Error(r.Error)
			}
		})
	}
	if err != nil {
		t.Fatalf("node run.mjs: %v\n%s\n%s", err, tail(string(out), 40), tail(stderr.String(), 40))
	}
	return n
}

// TestSDKsRestart: an E2B sandbox outlives a kill -9 of the daemon. The
// SDKs make a sandbox with a file, a background command reading its stdin
// and kernel state in two code contexts; the daemon is killed with
// SIGKILL, and through the next daemon on the same state directory the
// SDKs list and connect to the sandbox (its envd token still good), read
// the file, run commands, follow and feed the background command, find
// both contexts with their state, and kill it. The warm pool is taken up
// again, not made anew.
func TestSDKsRestart(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock", "node", "jupyter")
	sdkRestart(t, "native")
}

// TestSDKsRestartGVisor is TestSDKsRestart with gVisor sandboxes.
func TestSDKsRestartGVisor(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "runsc", "node", "jupyter")
	sdkRestart(t, "gvisor")
}

func sdkRestart(t *testing.T, driver string) {
	// The agents of the killed daemon come to this process (their
	// subreaper) instead of the host's init, which may not reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		for {
			var ws unix.WaitStatus
			if pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
				return
			}
		}
	})
	dir := npmInstall(t)
	s := newServeState(t, driver)
	state := filepath.Join(t.TempDir(), "before.json")
	e := nodeEnv{key: s.key, other: s.other}

	d := s.launch(t)
	d.settled(t)
	e.extra = []string{"AIRLOCK_E2B_PHASE=before", "AIRLOCK_E2B_STATE=" + state}
	if n := runNode(t, dir, d, e, "restart.test.mjs"); n != 1 || t.Failed() {
		t.Fatalf("the run before the restart reported %d tests (want 1), or failed", n)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d = s.launch(t, "--shutdown-sandboxes")
	var made struct {
		ID string `json:"id"`
	}
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &made) != nil || made.ID == "" {
		t.Fatalf("the run before the restart left no sandbox id in %s: %v %q", state, err, b)
	}
	// The new daemon took up the E2B sandbox and the pool's sandboxes.
	states := map[string]int{}
	for _, m := range reattachedRE.FindAllStringSubmatch(d.log(), -1) {
		states[m[2]]++
		if m[1] == made.ID && m[2] != "running" {
			t.Errorf("the E2B sandbox %s was reattached as %s, want running", made.ID, m[2])
		}
	}
	if !strings.Contains(d.log(), "sandbox_id="+made.ID) || states["running"] != 1 || states["pooled"] != sdkPool {
		t.Errorf("the daemon after the restart reattached %v (want 1 running, %d pooled, %s among them):\n%s", states, sdkPool, made.ID, tail(d.log(), 30))
	}
	e.extra = []string{"AIRLOCK_E2B_PHASE=after", "AIRLOCK_E2B_STATE=" + state}
	if n := runNode(t, dir, d, e, "restart.test.mjs"); n != 5 {
		t.Errorf("the run after the restart reported %d tests, want 5", n)
	}
	d.settled(t)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
