package tty

import (
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair opens a terminal of the host: the master and the slave ends.
func pair(t *testing.T) (master, slave int) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open a terminal: %v", err)
	}
	t.Cleanup(func() { unix.Close(m) })
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	return m, s
}

func TestRawAndRestore(t *testing.T) {
	m, s := pair(t)
	if !IsTerminal(s) {
		t.Fatal("a terminal is not a terminal")
	}
	f, _ := os.CreateTemp(t.TempDir(), "x")
	defer f.Close()
	if IsTerminal(int(f.Fd())) {
		t.Error("a file is a terminal")
	}
	if err := unix.IoctlSetWinsize(s, unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 111}); err != nil {
		t.Fatal(err)
	}
	if sz, err := GetSize(s); err != nil || sz != (Size{Rows: 33, Cols: 111}) {
		t.Errorf("GetSize = %+v, %v", sz, err)
	}
	before, _ := unix.IoctlGetTermios(s, unix.TCGETS)
	st, err := MakeRaw(s)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := unix.IoctlGetTermios(s, unix.TCGETS)
	if raw.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG|unix.IEXTEN) != 0 || raw.Iflag&(unix.ICRNL|unix.IXON) != 0 || raw.Oflag&unix.OPOST != 0 {
		t.Errorf("raw mode left line editing, echo, signals or output processing on: %+v", raw)
	}
	// Typed in raw mode: Ctrl-C and CR arrive as they are.
	if _, err := unix.Write(m, []byte("a\x03\r")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	var n int
	for deadline := time.Now().Add(2 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n, _ = unix.Read(s, buf)
	}
	if string(buf[:max(n, 0)]) != "a\x03\r" {
		t.Errorf("raw input arrived as %q", buf[:max(n, 0)])
	}
	// Typed but not read when the session ends: dropped.
	if _, err := unix.Write(m, []byte("leftover")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := st.Restore(); err != nil {
		t.Fatal(err)
	}
	after, _ := unix.IoctlGetTermios(s, unix.TCGETS)
	if *after != *before {
		t.Errorf("modes after Restore %+v, before %+v", *after, *before)
	}
	if n, err := unix.Read(s, buf); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("what was typed before Restore is still there: %q, %v", buf[:max(n, 0)], err)
	}
}
