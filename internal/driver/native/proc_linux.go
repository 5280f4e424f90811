package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/forker"
)

// agentProc is the agent's process, followed through its pidfd in the
// runtime's poller. os/exec waits for a child in a blocking waitid: one
// host thread per live sandbox, which at thousands of sandboxes is
// thousands of the machine's pids (kernel.pid_max). The agent is this
// process's child, or the forker's (a persistent driver's), which reaps
// it: then its pidfd says when it has exited.
type agentProc struct {
	pid   int
	pidfd *os.File // non-blocking, in the poller
	raw   syscall.RawConn
	child bool // this process reaps it
	// logDone is closed once the agent's standard error, when it is a
	// pipe, has been read to its end.
	logDone chan struct{}
	mu      sync.Mutex
	reaped  bool
}

// startAgent starts path with files as its descriptors 0, 1, 2, 3… (nil
// is /dev/null), from the forker fk when it is not nil, else from this
// process. A stderr that is not an *os.File gets a pipe, read until the
// agent and every copy of its end are gone.
func startAgent(fk *forker.Client, path string, argv []string, stderr io.Writer, files []*os.File, sys *syscall.SysProcAttr) (*agentProc, error) {
	p := &agentProc{logDone: make(chan struct{}), child: fk == nil}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	fds := []uintptr{null.Fd(), null.Fd(), null.Fd()}
	var logR *os.File
	switch w := stderr.(type) {
	case *os.File:
		fds[2] = w.Fd()
		close(p.logDone)
	case nil:
		close(p.logDone)
	default:
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer pw.Close()
		logR = r
		fds[2] = pw.Fd()
		go func() {
			defer close(p.logDone)
			defer r.Close()
			copySmall(w, r)
		}()
	}
	for _, f := range files {
		if f == nil {
			fds = append(fds, null.Fd())
			continue
		}
		fds = append(fds, f.Fd())
	}
	pidfd := -1
	attr := *sys
	attr.PidFD = &pidfd
	var pid int
	if fk != nil {
		attr.PidFD = nil
		pid, pidfd, err = fk.Fork(argv, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: &attr})
	} else {
		pid, err = forkFromForker(path, argv, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: &attr})
	}
	if err != nil {
		if logR != nil {
			logR.Close() // the copier ends on the closed pipe
		}
		return nil, err
	}
	p.pid = pid
	if pidfd < 0 {
		// A kernel without CLONE_PIDFD (before 5.2): the native driver
		// needs 5.13 for Landlock, so this does not happen.
		_ = unix.Kill(pid, unix.SIGKILL)
		if fk == nil {
			_, _ = unix.Wait4(pid, nil, 0, nil)
		}
		return nil, errors.New("start the sandbox: the kernel gave no pidfd for the agent (needs Linux 5.3 or later)")
	}
	if err := unix.SetNonblock(pidfd, true); err != nil {
		killPidfd(pidfd, p.child)
		unix.Close(pidfd)
		return nil, err
	}
	p.pidfd = os.NewFile(uintptr(pidfd), "agent-pidfd")
	if p.raw, err = p.pidfd.SyscallConn(); err != nil {
		killPidfd(pidfd, p.child)
		p.pidfd.Close()
		return nil, err
	}
	return p, nil
}

// killPidfd kills the process of pidfd and, when it is this process's
// child, reaps it.
func killPidfd(pidfd int, child bool) {
	_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	if child {
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &unix.Siginfo{}, unix.WEXITED, nil)
	}
}

// awaitReaped waits (up to 5 s) until the forker has reaped the exited
// process of pidfd: a zombie still holds its pid and its uid, and the
// sandbox is not gone until it is. A zombie takes signals, a reaped
// process's pidfd refuses them (ESRCH).
func awaitReaped(pidfd int) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Microsecond) {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); errors.Is(err, unix.ESRCH) {
			return
		}
	}
}

// exited says whether the process of pidfd has exited (the forker reaps
// it).
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents != 0
}

// wait returns once the agent has exited and has been reaped (its pidfd
// closed), and its standard error read to the end. It parks a goroutine,
// not a thread.
func (p *agentProc) wait() {
	err := p.raw.Read(func(fd uintptr) bool {
		if !p.child {
			if !exited(int(fd)) {
				return false // running: wait until the pidfd is readable
			}
			awaitReaped(int(fd))
			p.mu.Lock()
			p.reaped = true
			p.mu.Unlock()
			return true
		}
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return false // running: wait until the pidfd is readable
		case err == nil && info.Signo == 0:
			return false
		case errors.Is(err, unix.EINTR):
			return false
		}
		// Reaped now (err nil), or gone in a way no retry changes.
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
		return true
	})
	if err != nil && !p.child {
		// Not in the poller after all: wait the blocking way.
		for !exited(int(p.pidfd.Fd())) {
			fds := []unix.PollFd{{Fd: int32(p.pidfd.Fd()), Events: unix.POLLIN}}
			_, _ = unix.Poll(fds, -1)
		}
		awaitReaped(int(p.pidfd.Fd()))
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
	} else if err != nil {
		// Not in the poller after all: wait the blocking way.
		for {
			if _, err := unix.Wait4(p.pid, nil, 0, nil); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		p.mu.Lock()
		p.reaped = true
		p.mu.Unlock()
	}
	p.pidfd.Close()
	<-p.logDone
}

// kill sends SIGKILL to the agent.
func (p *agentProc) kill() error { return p.signal(unix.SIGKILL) }

// signal sends sig to the agent unless it has been reaped already (its pid
// may belong to another process by then; the pidfd never does).
func (p *agentProc) signal(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	var kerr error
	if err := p.raw.Control(func(fd uintptr) { kerr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(kerr, unix.ESRCH) {
		return nil
	}
	if kerr != nil {
		return fmt.Errorf("signal the sandbox's agent: %w", kerr)
	}
	return nil
}

// copySmall copies r to w through a small buffer: the agent says little,
// and io.Copy's 32 KiB, held for as long as the agent lives, was the
// largest part of what the host holds per idle sandbox.
func copySmall(w io.Writer, r io.Reader) {
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// The parent-death signal of a one-shot run's agent (Pdeathsig) is sent
// when the thread that forked it ends, not the process: Go ends a thread
// whenever a goroutine exits locked to it, anywhere in the process. Every
// agent is forked from one thread that never ends.
var (
	forkerOnce sync.Once
	forkerJobs chan forkJob
)

type forkJob struct {
	path  string
	argv  []string
	attr  *syscall.ProcAttr
	reply chan forkResult
}

type forkResult struct {
	pid int
	err error
}

// runForker forks what jobs asks for from its own thread, which never
// ends: it lives as long as the process (leak checks ignore it by this
// name).
func runForker(jobs <-chan forkJob) {
	runtime.LockOSThread() // never unlocked: this thread must not end
	for j := range jobs {
		pid, err := forker.Start(j.path, j.argv, j.attr)
		j.reply <- forkResult{pid, err}
	}
}

func forkFromForker(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	forkerOnce.Do(func() {
		forkerJobs = make(chan forkJob)
		go runForker(forkerJobs)
	})
	reply := make(chan forkResult, 1)
	forkerJobs <- forkJob{path, argv, attr, reply}
	r := <-reply
	return r.pid, r.err
}

// forkers are the persistent drivers' forkers, one per agent binary, for
// the process's life.
var (
	forkersMu sync.Mutex
	forkers   = map[string]*forker.Client{}
)

// forkerOf returns the forker that starts agent (started on first use).
func forkerOf(agent string) *forker.Client {
	forkersMu.Lock()
	defer forkersMu.Unlock()
	c := forkers[agent]
	if c == nil {
		c = &forker.Client{Path: agent, Start: forkFromForker}
		forkers[agent] = c
	}
	return c
}
