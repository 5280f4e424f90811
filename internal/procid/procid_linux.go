// Package procid names one process for good, whatever becomes of its pid:
// its start time (with the pid, an identity that is never reused), a pidfd
// of it, who answers on a unix socket, and a watch that calls back when it
// exits. The drivers use it to find again the holders of sandboxes they did
// not start, and copy-on-write jobs to tell their process from a reused pid.
package procid

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// Peer is who answers on a unix socket: the process that listens on it.
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
func InCgroup(pid int, rel string) bool { return cgroup.Within(pid, rel) }

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
