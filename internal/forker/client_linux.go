package forker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// answerTimeout bounds a request: a forker that has not answered by then
// is killed, and the create fails instead of hanging. (A variable for
// tests.)
var answerTimeout = 10 * time.Second

// StartFunc forks and execs as syscall.StartProcess does, from a thread
// that lives as long as the host (the forker's parent-death signal
// follows the thread that forked it).
type StartFunc func(path string, argv []string, attr *syscall.ProcAttr) (int, error)

// Client is the host's end of a forker: it starts the forker on first
// use, sends it one request at a time, and starts it again when it has
// died. It holds two descriptors while the forker runs: its socket and its
// pidfd.
type Client struct {
	// Path is the agent's binary, which the forker runs as and starts.
	Path string
	// Start forks the forker itself.
	Start StartFunc

	mu    sync.Mutex
	fd    int // the socket; -1 when no forker runs
	pid   int
	pidfd int
	init  bool
}

// Fork starts the agent's binary as attr says, in the forker, and returns
// its pid and a pidfd of it. The agent is the forker's child, not the
// caller's: the forker reaps it, and the pidfd polls readable once it has
// exited. attr.Sys may ask for what the request carries (namespaces, id
// maps, setgroups, a new session, credentials, a v2 cgroup to start in);
// anything else (a parent-death signal, ptrace, …) is refused.
func (c *Client) Fork(argv []string, attr *syscall.ProcAttr) (pid, pidfd int, err error) {
	req, fds, err := encode(argv, attr)
	if err != nil {
		return 0, -1, err
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return 0, -1, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.init {
		c.fd, c.pidfd, c.init = -1, -1, true
	}
	for try := 0; ; try++ {
		if c.fd < 0 {
			if err := c.startLocked(); err != nil {
				return 0, -1, err
			}
		}
		err = unix.Sendmsg(c.fd, msg, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
		if err == nil {
			break
		}
		// A forker that died since the last request never read this one:
		// start another and send it again, once.
		c.stopLocked()
		if try > 0 || !(errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.ECONNREFUSED)) {
			return 0, -1, fmt.Errorf("send the agent's start to the forker: %w", err)
		}
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn, flags int
	for {
		n, oobn, flags, _, err = unix.Recvmsg(c.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	got, ferr := rights(oob[:oobn])
	switch {
	case errors.Is(err, unix.EAGAIN):
		err = fmt.Errorf("the forker (pid %d) did not answer within %v; it was killed, and the next sandbox starts another", c.pid, answerTimeout)
	case err != nil:
		err = fmt.Errorf("the forker (pid %d) failed: %w; the next sandbox starts another", c.pid, err)
	case n == 0:
		err = fmt.Errorf("the forker (pid %d) exited before it answered; the next sandbox starts another", c.pid)
	case ferr != nil:
		err = ferr
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		err = errors.New("the forker's answer was cut short")
	}
	if err != nil {
		for _, fd := range got {
			unix.Close(fd)
		}
		// Whatever state it is in, this forker is done with: a late
		// answer must never be read as the next request's.
		c.stopLocked()
		return 0, -1, fmt.Errorf("start the agent: %w", err)
	}
	var rep reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil || (rep.Err == "" && len(got) != 1) {
		for _, fd := range got {
			unix.Close(fd)
		}
		c.stopLocked()
		if err == nil {
			err = fmt.Errorf("%d descriptors with it, want 1", len(got))
		}
		return 0, -1, fmt.Errorf("start the agent: the forker's answer makes no sense: %w", err)
	}
	if rep.Err != "" {
		for _, fd := range got {
			unix.Close(fd)
		}
		if rep.Errno != 0 {
			return 0, -1, fmt.Errorf("%s (in the forker): %w", rep.Err, syscall.Errno(rep.Errno))
		}
		return 0, -1, fmt.Errorf("%s (in the forker)", rep.Err)
	}
	return rep.Pid, got[0], nil
}

// encode turns attr into a request and the descriptors it carries.
func encode(argv []string, attr *syscall.ProcAttr) (request, []int, error) {
	sys := attr.Sys
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	// What the request cannot carry is refused, not dropped.
	rest := *sys
	rest.Cloneflags, rest.UidMappings, rest.GidMappings = 0, nil, nil
	rest.GidMappingsEnableSetgroups, rest.Setsid, rest.Credential = false, false, nil
	rest.UseCgroupFD, rest.CgroupFD, rest.PidFD = false, 0, nil
	if rest.Pdeathsig != 0 || rest.Ptrace || rest.Setpgid || rest.Setctty || rest.Noctty || rest.Foreground ||
		rest.Chroot != "" || rest.Unshareflags != 0 || len(rest.AmbientCaps) > 0 {
		return request{}, nil, errors.New("start the agent: the forker cannot carry these process attributes")
	}
	if len(attr.Env) > 0 || attr.Dir != "" {
		return request{}, nil, errors.New("start the agent: the forker starts it with no environment, in its own directory")
	}
	req := request{
		Argv: argv, Cloneflags: sys.Cloneflags, UIDMap: sys.UidMappings, GIDMap: sys.GidMappings,
		Setgroups: sys.GidMappingsEnableSetgroups, Setsid: sys.Setsid, Credential: sys.Credential,
		Files: len(attr.Files), CgroupFD: sys.UseCgroupFD,
	}
	fds := make([]int, 0, len(attr.Files)+1)
	for _, f := range attr.Files {
		fds = append(fds, int(f))
	}
	if sys.UseCgroupFD {
		fds = append(fds, sys.CgroupFD)
	}
	if len(fds) > maxFDs {
		return request{}, nil, fmt.Errorf("start the agent: %d descriptors, more than one request carries", len(fds))
	}
	return req, fds, nil
}

// startLocked starts a forker.
func (c *Client) startLocked() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("start the forker: %w", err)
	}
	defer unix.Close(fds[1])
	tv := unix.NsecToTimeval(answerTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("start the forker: %w", err)
	}
	if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("start the forker: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		unix.Close(fds[0])
		return err
	}
	defer null.Close()
	pidfd := -1
	pid, err := c.Start(c.Path, []string{"airlock-agent", Arg}, &syscall.ProcAttr{
		Env:   []string{},
		Files: []uintptr{null.Fd(), null.Fd(), os.Stderr.Fd(), uintptr(fds[1])},
		// Its own session: a terminal's signals to the host do not reach
		// it; it dies with the host's forking thread.
		Sys: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd},
	})
	if err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("start the forker: %w", err)
	}
	c.fd, c.pid, c.pidfd = fds[0], pid, pidfd
	return nil
}

// stopLocked kills the forker and reaps it. The agents it started run on
// (they pass to the host's init).
func (c *Client) stopLocked() {
	if c.fd < 0 {
		return
	}
	unix.Close(c.fd)
	c.fd = -1
	if c.pidfd >= 0 {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		for {
			if err := unix.Waitid(unix.P_PIDFD, c.pidfd, &unix.Siginfo{}, unix.WEXITED, nil); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		unix.Close(c.pidfd)
		c.pidfd = -1
	} else {
		_ = unix.Kill(c.pid, unix.SIGKILL)
		_, _ = unix.Wait4(c.pid, nil, 0, nil)
	}
}

// Close stops the forker.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init {
		c.stopLocked()
	}
}

// Pid is the running forker's pid, 0 when none runs.
func (c *Client) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.init || c.fd < 0 {
		return 0
	}
	return c.pid
}
