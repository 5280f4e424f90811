package native

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// agentProc is the agent's process, this process's child, followed through
// its pidfd in the runtime's poller. os/exec waits for a child in a
// blocking waitid: one host thread per live sandbox, which at thousands of
// sandboxes is thousands of the machine's pids (kernel.pid_max).
type agentProc struct {
	pid   int
	pidfd *os.File // non-blocking, in the poller
	raw   syscall.RawConn
	// logDone is closed once the agent's standard error, when it is a
	// pipe, has been read to its end.
	logDone chan struct{}
	mu      sync.Mutex
	reaped  bool
}

// startAgent starts path with files as its descriptors 0, 1, 2, 3… (nil
// is /dev/null). A stderr that is not an *os.File gets a pipe, read
// until the agent and every copy of its end are gone.
func startAgent(path string, argv []string, stderr io.Writer, files []*os.File, sys *syscall.SysProcAttr) (*agentProc, error) {
	p := &agentProc{logDone: make(chan struct{})}
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
	pid, err := forkFromForker(path, argv, &syscall.ProcAttr{Env: []string{}, Files: fds, Sys: &attr})
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
		_, _ = unix.Wait4(pid, nil, 0, nil)
		return nil, errors.New("start the sandbox: the kernel gave no pidfd for the agent (needs Linux 5.3 or later)")
	}
	if err := unix.SetNonblock(pidfd, true); err != nil {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &unix.Siginfo{}, unix.WEXITED, nil)
		unix.Close(pidfd)
		return nil, err
	}
	p.pidfd = os.NewFile(uintptr(pidfd), "agent-pidfd")
	if p.raw, err = p.pidfd.SyscallConn(); err != nil {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		_ = unix.Waitid(unix.P_PIDFD, pidfd, &unix.Siginfo{}, unix.WEXITED, nil)
		p.pidfd.Close()
		return nil, err
	}
	return p, nil
}

// wait returns once the agent has exited and has been reaped (its pidfd
// closed), and its standard error read to the end. It parks a goroutine,
// not a thread.
func (p *agentProc) wait() {
	err := p.raw.Read(func(fd uintptr) bool {
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
	if err != nil {
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
		var pid int
		err := asOwner(namespaceOwner(j.attr.Sys), func() error {
			var err error
			pid, _, err = syscall.StartProcess(j.path, j.argv, j.attr)
			return err
		})
		j.reply <- forkResult{pid, err}
	}
}

// namespaceOwner is the host uid that is to own the new user namespace sys
// makes: the one the sandbox's root maps to, or -1 when sys makes none.
//
// A user namespace's owner pays for it: the kernel charges what a process
// in it takes of the per-user pools (inotify instances and watches, pending
// signals, POSIX message queue bytes, locked shared memory) to its own user
// in its namespace and, at the host's level, to the namespace's owner. With
// root as the owner, every sandbox drew on root's pools, shared with the
// host's own services: one sandbox taking all 128 inotify instances made
// inotify_init1 fail with EMFILE for root everywhere on the host. Owned by
// its own uid range, each sandbox draws on a pool of its own.
func namespaceOwner(sys *syscall.SysProcAttr) int {
	if sys == nil || sys.Cloneflags&unix.CLONE_NEWUSER == 0 || len(sys.UidMappings) == 0 || sys.UidMappings[0].ContainerID != 0 {
		return -1
	}
	return sys.UidMappings[0].HostID
}

// asOwner runs f, which forks, with the calling thread's effective uid set
// to uid (none when uid is -1), so that a user namespace the fork makes is
// owned by uid. The thread keeps its capabilities meanwhile (it writes the
// child's uid map and puts it into its cgroup) and gets its own uid back
// afterwards. Only this thread changes: the calls are raw system calls,
// not the runtime's all-threads ones. The caller is locked to its thread.
func asOwner(uid int, f func() error) error {
	if uid < 0 || unix.Geteuid() != 0 {
		return f() // only root can own a namespace by another uid
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("read the forking thread's capabilities: %w", err)
	}
	keep := ^uintptr(0) // -1: leave the real and saved uids as they are
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		return fmt.Errorf("take uid %d to own the sandbox's user namespace: %w", uid, e)
	}
	// Back to uid 0 the kernel copies the permitted capabilities to the
	// effective ones again.
	defer func() {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
			panic(fmt.Sprintf("native: the forking thread cannot take back its uid: %v", e))
		}
	}()
	// Leaving uid 0 emptied the effective set; the permitted set is as
	// it was (the real and saved uids are still 0).
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("keep the forking thread's capabilities as uid %d: %w", uid, err)
	}
	return f()
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
