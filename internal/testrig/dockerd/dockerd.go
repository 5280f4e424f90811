// Package dockerd gives tests a Docker engine: the one DOCKER_HOST names,
// or the local socket's, when it answers; else one it starts itself (the
// dockerd of Debian's docker.io, there is no systemd to start it), with
// runsc registered as a runtime, without networking of its own. Test
// binaries that run at once share the started engine, and the last one to
// let go stops it.
//
//	func TestMain(m *testing.M) {
//		eng, err := dockerd.Ensure(ctx, os.Stderr)
//		…
//		os.Setenv("DOCKER_HOST", eng.Host)
//		code := m.Run()
//		eng.Release()
//	}
//
// TestImage imports the tests' image (rootimage: Debian minbase with
// python3 and procps) into the engine once.
package dockerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// Where the rig's own engine lives.
const (
	// Dir holds its socket, state, log and locks.
	Dir = testrig.DockerDir
	// Socket is where it listens.
	Socket = Dir + "/docker.sock"
	// DefaultHost is where an engine listens when DOCKER_HOST is unset.
	DefaultHost = "unix:///var/run/docker.sock"
)

// Engine is the engine the tests use.
type Engine struct {
	// Host is its address, as DOCKER_HOST takes it.
	Host string
	// Own says this rig started it (now or for another test binary).
	Own   bool
	users *os.File // a shared lock while this process uses the rig's engine
}

// startTimeout bounds how long a started engine may take to answer.
const startTimeout = 90 * time.Second

// Ensure finds or starts an engine. Progress and the reason for a start go
// to log.
func Ensure(ctx context.Context, log io.Writer) (*Engine, error) {
	if log == nil {
		log = io.Discard
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if err := Ping(ctx, h); err != nil {
			return nil, fmt.Errorf("DOCKER_HOST=%s does not answer: %w", h, err)
		}
		return &Engine{Host: h}, nil
	}
	if Ping(ctx, DefaultHost) == nil {
		return &Engine{Host: DefaultHost}, nil
	}
	return startOwn(ctx, log)
}

// startOwn uses the rig's engine, starting it when it does not answer.
func startOwn(ctx context.Context, log io.Writer) (_ *Engine, err error) {
	if err := os.MkdirAll(Dir, 0o700); err != nil {
		return nil, fmt.Errorf("make %s: %w", Dir, err)
	}
	lock, err := testrig.Acquire(ctx, filepath.Join(Dir, "start.lock"), "the test Docker engine")
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	users, err := os.OpenFile(filepath.Join(Dir, "users"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the test Docker engine's users lock: %w", err)
	}
	if err := syscall.Flock(int(users.Fd()), syscall.LOCK_SH); err != nil {
		users.Close()
		return nil, fmt.Errorf("lock the test Docker engine's users lock: %w", err)
	}
	defer func() {
		if err != nil {
			users.Close()
		}
	}()
	e := &Engine{Host: "unix://" + Socket, Own: true, users: users}
	if Ping(ctx, e.Host) == nil {
		return e, nil
	}
	if err := start(ctx, log); err != nil {
		return nil, err
	}
	return e, nil
}

// start starts dockerd and waits until it answers.
func start(ctx context.Context, log io.Writer) error {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return errors.New("no Docker engine answers and dockerd is not installed: apt-get install docker.io")
	}
	cfg := map[string]any{}
	if rt := runsc(); rt != "" {
		// gVisor's own cgroup v2 file system inside: the agent gives every
		// exec a group there.
		cfg["runtimes"] = map[string]any{"runsc": map[string]any{"path": rt, "runtimeArgs": []string{"--in-sandbox-cgroup=v2"}}}
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(Dir, "daemon.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return fmt.Errorf("write the test Docker engine's config: %w", err)
	}
	logPath := filepath.Join(Dir, "dockerd.log")
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("open the test Docker engine's log: %w", err)
	}
	defer lf.Close()
	_ = os.Remove(Socket)
	args := []string{
		"--config-file", cfgPath,
		"--data-root", filepath.Join(testrig.CacheDir(), "dockerd", "data"),
		"--exec-root", filepath.Join(Dir, "exec"),
		"--pidfile", filepath.Join(Dir, "dockerd.pid"),
		"-H", "unix://" + Socket,
		// Sandboxes have no network: no bridge, no firewall rules.
		"--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
	}
	fmt.Fprintf(log, "dockerd: starting the test Docker engine at %s (log %s)\n", Socket, logPath)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = "/"
	// The engine outlives the test binary that started it, while other
	// test binaries use it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startTimeout)
	for {
		if Ping(ctx, "unix://"+Socket) == nil {
			fmt.Fprintf(log, "dockerd: the test Docker engine answers (pid %d)\n", cmd.Process.Pid)
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("dockerd exited before it answered: %w\n%s", err, testrig.Tail(logPath, 15))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("dockerd did not answer within %v\n%s", startTimeout, testrig.Tail(logPath, 15))
		}
	}
}

// runsc is the runsc to register with the engine: airlock's pinned build,
// else one on PATH; "" for none.
func runsc() string {
	matches, _ := filepath.Glob("/opt/airlock/runsc-*")
	for _, m := range matches {
		if !strings.HasSuffix(m, ".tmp") {
			return m
		}
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	return ""
}

// Release lets go of the engine; the last user of the rig's own engine
// stops it.
func (e *Engine) Release() {
	if e == nil || e.users == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = syscall.Flock(int(e.users.Fd()), syscall.LOCK_UN)
	e.users.Close()
	e.users = nil
	lock, err := testrig.Acquire(ctx, filepath.Join(Dir, "start.lock"), "the test Docker engine")
	if err != nil {
		return
	}
	defer lock.Unlock()
	users, err := os.OpenFile(filepath.Join(Dir, "users"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer users.Close()
	if syscall.Flock(int(users.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // another test binary uses it
	}
	Stop()
}

// Stop stops the rig's own engine, if it runs.
func Stop() {
	b, err := os.ReadFile(filepath.Join(Dir, "dockerd.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	// The pid is dockerd's only if its command line says so.
	if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); !strings.Contains(string(cmd), Socket) {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for range 300 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Ping says whether the engine at host answers.
func Ping(ctx context.Context, host string) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	base := "http://docker"
	switch {
	case strings.HasPrefix(host, "unix://"):
		sock := strings.TrimPrefix(host, "unix://")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	case strings.HasPrefix(host, "tcp://"):
		base = "http://" + strings.TrimPrefix(host, "tcp://")
	default:
		return fmt.Errorf("DOCKER_HOST %q: the test rig speaks unix:// and tcp:// only", host)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping: %s", resp.Status)
	}
	return nil
}
