package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// component is one process of the cluster: etcd, kube-apiserver, ….
type component struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	waitErr error         // set before exited is closed
}

// tailLines is how many log lines an error carries.
const tailLines = 15

// startComponent starts a component with its output in logDir/<name>.log.
// It dies with this process (SIGKILL on parent death): a test binary that
// crashes does not leave it running, and the next start cleans up the rest.
func startComponent(name, logDir string, argv []string) (*component, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "# %s %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = componentEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := startOnSpawner(cmd); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, argv[0], err)
	}
	c := &component{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// The parent-death signal fires when the thread that forked the child
// exits, not the process; Go ends a thread when a goroutine that locked it
// returns (airlock's confinement does so on purpose). So components are
// forked on one locked thread that lives as long as the process.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startOnSpawner starts cmd on the spawner thread.
func startOnSpawner(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not end
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// componentEnv is the components' environment: this one's, without
// proxies (everything the rig talks to is local) and without
// CONTAINERD_ variables a developer may have set.
func componentEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.EqualFold(k, "http_proxy"), strings.EqualFold(k, "https_proxy"),
			strings.EqualFold(k, "all_proxy"), strings.EqualFold(k, "no_proxy"),
			strings.HasPrefix(k, "CONTAINERD_"), k == "KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// pollInterval is how often readiness is checked.
const pollInterval = 100 * time.Millisecond

// waitReady calls check until it succeeds, the process exits, or timeout
// passes. The error names the component, says what was last wrong, and
// carries the last lines of its log.
func (c *component) waitReady(ctx context.Context, timeout time.Duration, check func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := errors.New("not checked yet")
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		// A check cut short by the deadline says nothing new.
		if ctx.Err() == nil {
			last = err
		}
		select {
		case <-c.exited:
			return c.failure(fmt.Sprintf("exited (%v) before it was ready", c.waitErr))
		case <-ctx.Done():
			return c.failure(fmt.Sprintf("was not ready within %v: %v", timeout, last))
		case <-time.After(pollInterval):
		}
	}
}

// failure is an error naming the component, with its log's last lines.
func (c *component) failure(what string) error {
	return fmt.Errorf("%s %s; the last lines of its log (%s):\n%s", c.name, what, c.logPath, logTail(c.logPath, tailLines))
}

// logNoise marks log lines that say nothing about the rig: the kubelet's
// cAdvisor watches every cgroup on the machine and complains when other
// programs' cgroups vanish before it looks.
var logNoise = []string{"watcher.go:"}

// logTail returns the last n lines of a log, without noise.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	var kept []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		noise := false
		for _, s := range logNoise {
			if bytes.Contains(line, []byte(s)) {
				noise = true
				break
			}
		}
		if !noise {
			kept = append(kept, line...)
		}
	}
	return testrig.TailLines(kept, n)
}

// running says whether the process has not exited.
func (c *component) running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the component's process group, and SIGKILL after
// grace.
func (c *component) stop(grace time.Duration) {
	if !c.running() {
		return
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
	}
}

// rss is the process's resident memory in bytes, or 0 when it is gone.
func (c *component) rss() int64 {
	if !c.running() {
		return 0
	}
	return pidRSS(c.cmd.Process.Pid)
}

// pidRSS reads VmRSS from /proc/<pid>/status.
func pidRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// errStopped says the cluster was stopped.
var errStopped = errors.New("the cluster is stopped")
