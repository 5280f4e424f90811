package agentd

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ptmxPaths are where the sandbox's own terminal multiplexer is: its
// devpts instance's, which the native agent mounts at /dev/pts (see
// mountSpecial) and runsc mounts from the bundle, then /dev/ptmx.
var ptmxPaths = []string{"/dev/pts/ptmx", "/dev/ptmx"}

// openPTY opens a new terminal of the sandbox's own devpts instance, of
// size, that belongs to uid and gid (as a login's terminal belongs to
// its user, so that the command may reopen it): master is the agent's
// end (pollable), slave the command's.
func openPTY(size sandbox.TermSize, uid, gid int) (master, slave *os.File, err error) {
	mfd := -1
	for _, p := range ptmxPaths {
		mfd, err = unix.Open(p, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal in the sandbox: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(mfd)
		}
	}()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	sfd, err := peer(mfd)
	if err != nil {
		return nil, nil, err
	}
	if err := setupTerm(sfd, size); err != nil {
		unix.Close(sfd)
		return nil, nil, err
	}
	if err := unix.Fchown(sfd, uid, gid); err != nil {
		unix.Close(sfd)
		return nil, nil, fmt.Errorf("give the terminal to the workload's user: %w", err)
	}
	ok = true
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(sfd), "pts"), nil
}

// peer opens the slave of master: by the master itself (TIOCGPTPEER, no
// path to race on), or by its number in /dev/pts where the kernel lacks
// that (Linux before 4.13, gVisor).
func peer(mfd int) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return int(fd), nil
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		return -1, fmt.Errorf("find the terminal's number: %w", err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the terminal: %w", err)
	}
	return sfd, nil
}

// setupTerm gives the terminal its size, and says its input is UTF-8 (so
// that erasing a character erases all of its bytes).
func setupTerm(fd int, size sandbox.TermSize) error {
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols}); err != nil {
		return fmt.Errorf("size the terminal: %w", err)
	}
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("read the terminal's modes: %w", err)
	}
	t.Iflag |= unix.IUTF8
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return fmt.Errorf("set the terminal's modes: %w", err)
	}
	return nil
}

// resize sets the size of the terminal whose master is m; the kernel sends
// SIGWINCH to its foreground process group.
func resize(m *os.File, size sandbox.TermSize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	rc, err := m.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	return ierr
}
