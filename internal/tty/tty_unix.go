//go:build linux || darwin

package tty

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, ioctlGet)
	return err == nil
}

// GetSize returns the size of the terminal fd.
func GetSize(fd int) (Size, error) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return Size{}, fmt.Errorf("read the terminal's size: %w", err)
	}
	return Size{Rows: ws.Row, Cols: ws.Col}, nil
}

// State is a terminal's modes, as they were before MakeRaw.
type State struct {
	fd  int
	old unix.Termios
}

// MakeRaw puts the terminal fd into raw mode: every byte typed goes to the
// program as it is (Ctrl-C too, which no longer signals airlock), without
// echo, and output is not translated. Restore undoes it.
func MakeRaw(fd int) (*State, error) {
	t, err := unix.IoctlGetTermios(fd, ioctlGet)
	if err != nil {
		return nil, fmt.Errorf("read the terminal's modes: %w", err)
	}
	s := &State{fd: fd, old: *t}
	// As cfmakeraw(3) does.
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, ioctlSet, t); err != nil {
		return nil, fmt.Errorf("put the terminal into raw mode: %w", err)
	}
	return s, nil
}

// Restore puts the terminal's modes back as they were, once what was
// written has been sent, and drops what was typed but not read: nothing
// typed into the session (or sent by the terminal in answer to a query of
// the program's) reaches the caller's shell.
func (s *State) Restore() error {
	if err := unix.IoctlSetTermios(s.fd, ioctlSetFlush, &s.old); err != nil {
		return fmt.Errorf("restore the terminal's modes: %w", err)
	}
	return nil
}
