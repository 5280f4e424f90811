package agentdriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Host sessions with an agent that outlives the process that made its
// sandbox (agent.Config.Listen): where their sockets live, how the host
// reaches one and checks who answers, and how it notices that the holder
// of a sandbox it did not start has died.

// SessionDir makes (or checks) the directory of the agents' session
// sockets below stateDir: root's alone (0700), so that nobody else can
// reach a sandbox's agent, and returns its path.
func SessionDir(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the session directory: %w", err)
	}
	// An older directory with looser rights is tightened.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("make the session directory root's alone: %w", err)
	}
	return dir, nil
}

// DialSession connects to the session socket at path. A socket that is not
// there yet or not listening yet (the holder is starting) is tried again
// every few milliseconds until ctx ends or gone is closed (the holder
// died).
func DialSession(ctx context.Context, path string, gone <-chan struct{}) (*net.UnixConn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c.(*net.UnixConn), nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("connect to the sandbox's agent: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to the sandbox's agent: %w (%w)", ctx.Err(), err)
		case <-gone:
			return nil, fmt.Errorf("connect to the sandbox's agent: it has exited (%w)", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Peer is who answers on a session socket: the process that listens on it.
type Peer struct {
	Pid, UID int
	// Pidfd refers to the process itself, whatever becomes of its pid;
	// the caller closes it.
	Pidfd *os.File
}

// PeerOf reads the credentials of the process listening at c's other end
// (SO_PEERCRED: whoever called listen), and a pidfd of it (SO_PEERPIDFD,
// or pidfd_open on kernels before 6.5).
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	pidfd := -1
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		if cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); cerr != nil {
			return
		}
		if pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = pfd
		}
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, fmt.Errorf("read the agent's credentials: %w", cerr)
	}
	if cred.Pid <= 0 {
		return Peer{}, errors.New("the session's peer has no pid here")
	}
	if pidfd < 0 {
		if pidfd, err = unix.PidfdOpen(int(cred.Pid), 0); err != nil {
			return Peer{}, fmt.Errorf("open the agent's pidfd: %w", err)
		}
	}
	unix.CloseOnExec(pidfd)
	return Peer{Pid: int(cred.Pid), UID: int(cred.Uid), Pidfd: os.NewFile(uintptr(pidfd), "pidfd")}, nil
}

// InCgroup says whether process pid is in the group rel ("airlock/ID") or
// below it, in any hierarchy.
func InCgroup(pid int, rel string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	want := "/" + strings.Trim(rel, "/")
	for _, line := range bytes.Split(b, []byte("\n")) {
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[2] == want || strings.HasPrefix(parts[2], want+"/") {
			return true
		}
	}
	return false
}

// StartTime is when process pid started, in clock ticks since boot
// (/proc/PID/stat field 22): with the pid, it names one process for good.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("short /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// OpenPid returns a pidfd of process pid if it is still the process that
// started at start (StartTime); an error wrapping os.ErrNotExist otherwise.
func OpenPid(pid int, start uint64) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, os.ErrNotExist)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	unix.CloseOnExec(fd)
	// Read after the open: a pid reused before it would show another start.
	if st, err := StartTime(pid); err != nil || st != start {
		f.Close()
		return nil, fmt.Errorf("process %d is another one now: %w", pid, os.ErrNotExist)
	}
	return f, nil
}

// PidWatch watches one process through its pidfd.
type PidWatch struct {
	f       *os.File
	stopped chan struct{}
}

// WatchPidfd calls exited once the process of pidfd has exited, from a
// goroutine that waits in the runtime's poller (no thread per process). It
// takes pidfd over.
func WatchPidfd(pidfd *os.File, exited func()) (*PidWatch, error) {
	raw, err := pidfd.SyscallConn()
	if err != nil {
		return nil, err
	}
	// The poller takes only non-blocking descriptors: wrap a copy that is
	// one (Fd would make the descriptor blocking again).
	nfd := -1
	var derr error
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.Dup(int(fd)) }); err != nil || derr != nil {
		return nil, errors.Join(err, derr)
	}
	pidfd.Close()
	unix.CloseOnExec(nfd)
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, err
	}
	w := &PidWatch{f: os.NewFile(uintptr(nfd), "pidfd"), stopped: make(chan struct{})}
	if raw, err = w.f.SyscallConn(); err != nil {
		w.f.Close()
		return nil, err
	}
	go func() {
		err := raw.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(p, 0)
			return n > 0
		})
		select {
		case <-w.stopped:
			return
		default:
		}
		if err == nil {
			exited()
		}
	}()
	return w, nil
}

// Kill sends SIGKILL to the process; one that is gone already is no error.
func (w *PidWatch) Kill() error {
	raw, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var kerr error
	if err := raw.Control(func(fd uintptr) { kerr = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(kerr, unix.ESRCH) {
		return nil
	}
	return kerr
}

// Stop ends the watch without calling exited, and closes the pidfd.
func (w *PidWatch) Stop() {
	select {
	case <-w.stopped:
	default:
		close(w.stopped)
		w.f.Close()
	}
}
