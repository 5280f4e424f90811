package forker

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
)

func TestMain(m *testing.M) { agenttest.Main(m) }

// threadStart forks from one goroutine locked to its thread for the
// test binary's life, as the native driver's forking thread does (the
// forker's parent-death signal follows that thread).
var threadStart = func() StartFunc {
	type job struct {
		path string
		argv []string
		attr *syscall.ProcAttr
		pid  chan int
		err  chan error
	}
	jobs := make(chan job)
	go func() {
		runtime.LockOSThread()
		for j := range jobs {
			pid, _, err := syscall.StartProcess(j.path, j.argv, j.attr)
			j.pid <- pid
			j.err <- err
		}
	}()
	return func(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
		j := job{path, argv, attr, make(chan int, 1), make(chan error, 1)}
		jobs <- j
		return <-j.pid, <-j.err
	}
}()

func newClient(t *testing.T) *Client {
	t.Helper()
	path, err := agentbin.Path()
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Path: path, Start: threadStart}
	t.Cleanup(c.Close)
	return c
}

// forkAgent starts the agent with /dev/null as its config: it fails and
// exits at once. It returns its pidfd.
func forkAgent(t *testing.T, c *Client) (int, int, error) {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fd := null.Fd()
	return c.Fork([]string{"airlock-agent"}, &syscall.ProcAttr{Files: []uintptr{fd, fd, fd}, Sys: &syscall.SysProcAttr{Setsid: true}})
}

// waitExit waits until the process of pidfd has exited and its pid is
// reaped (by the forker).
func waitExit(t *testing.T, pid, pidfd int) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 10_000); err != nil || n != 1 {
		t.Fatalf("the agent's pidfd did not say it exited: %d %v", n, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + itoa(pid)); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %d was not reaped", pid)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestForkAndReap: the forker starts the agent (its own binary), the host
// gets a pidfd that says when it exited, and the forker reaps it.
func TestForkAndReap(t *testing.T) {
	c := newClient(t)
	pid, pidfd, err := forkAgent(t, c)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	waitExit(t, pid, pidfd)
	if c.Pid() == 0 {
		t.Fatal("no forker runs")
	}
}

// TestForkerKilled: a forker killed between two requests is started again
// by the next, which succeeds.
func TestForkerKilled(t *testing.T) {
	c := newClient(t)
	pid, pidfd, err := forkAgent(t, c)
	if err != nil {
		t.Fatal(err)
	}
	waitExit(t, pid, pidfd)
	unix.Close(pidfd)
	first := c.Pid()
	if err := unix.Kill(first, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	pid, pidfd, err = forkAgent(t, c)
	if err != nil {
		t.Fatalf("fork after the forker was killed: %v", err)
	}
	defer unix.Close(pidfd)
	waitExit(t, pid, pidfd)
	if second := c.Pid(); second == first || second == 0 {
		t.Fatalf("forker %d, then %d: not started again", first, second)
	}
	// The killed forker was reaped.
	if _, err := os.Stat("/proc/" + itoa(first)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed forker %d is still there: %v", first, err)
	}
}

// TestForkerHangs: a forker that does not answer fails the request within
// the timeout with an error that says so, and is replaced by the next.
func TestForkerHangs(t *testing.T) {
	defer func(d time.Duration) { answerTimeout = d }(answerTimeout)
	answerTimeout = 300 * time.Millisecond
	c := newClient(t)
	pid, pidfd, err := forkAgent(t, c)
	if err != nil {
		t.Fatal(err)
	}
	waitExit(t, pid, pidfd)
	unix.Close(pidfd)
	stopped := c.Pid()
	if err := unix.Kill(stopped, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, _, err = forkAgent(t, c)
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("fork from a stopped forker: %v, want an error that it did not answer", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("the failed fork took %v", d)
	}
	pid, pidfd, err = forkAgent(t, c)
	if err != nil {
		t.Fatalf("fork after a forker hung: %v", err)
	}
	defer unix.Close(pidfd)
	waitExit(t, pid, pidfd)
	if c.Pid() == stopped {
		t.Fatal("the stopped forker is still the one used")
	}
}

// TestForkRefuses: what the request cannot carry is refused, not dropped.
func TestForkRefuses(t *testing.T) {
	c := newClient(t)
	_, _, err := c.Fork([]string{"airlock-agent"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}})
	if err == nil {
		t.Fatal("a parent-death signal was accepted")
	}
	_, _, err = c.Fork([]string{"airlock-agent"}, &syscall.ProcAttr{Env: []string{"A=B"}})
	if err == nil {
		t.Fatal("an environment was accepted")
	}
}
