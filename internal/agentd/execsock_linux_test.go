package agentd

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestRightsReader: the session's reader takes the exec sockets that ride
// on it, and drops the byte each rode on, so that what HTTP/2 reads is
// the host's bytes whole and in order, though the sockets came between
// them; a socket alone (only its byte) is not a read of nothing; a
// descriptor that is not a SOCK_SEQPACKET socket is closed, not served.
func TestRightsReader(t *testing.T) {
	host, ag := unixPair(t, unix.SOCK_STREAM)
	seq, _ := unixPair(t, unix.SOCK_SEQPACKET)
	pass := func(c interface{ File() (*os.File, error) }) {
		t.Helper()
		f, err := c.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, _, err := host.WriteMsgUnix([]byte{agent.ExecSocketByte}, unix.UnixRights(int(f.Fd())), nil); err != nil {
			t.Fatal(err)
		}
	}
	write := func(s string) {
		t.Helper()
		if _, err := host.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	var taken []int
	r := &rightsReader{UnixConn: ag, oob: make([]byte, unix.CmsgSpace(4*4)), take: func(fd int) { taken = append(taken, fd) }}
	write("PRI * ")
	pass(seq)
	write("HTTP/2.0")
	pass(seq)
	pass(seq)
	write("\r\n")
	host.CloseWrite()
	var got []byte
	buf := make([]byte, 4)
	for {
		n, err := r.Read(buf)
		if n == 0 && err == nil {
			t.Fatal("a read of nothing")
		}
		got = append(got, buf[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, []byte("PRI * HTTP/2.0\r\n")) {
		t.Errorf("the session read %q", got)
	}
	if len(taken) != 3 {
		t.Errorf("took %d descriptors, want 3", len(taken))
	}
	for _, fd := range taken {
		c := execConn(fd)
		if c == nil {
			t.Errorf("descriptor %d, a SOCK_SEQPACKET socket, was not taken as an exec socket", fd)
			continue
		}
		c.Close()
	}
	// Anything else is closed.
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c := execConn(fd); c != nil {
		t.Error("/dev/null was taken as an exec socket")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
		t.Error("a descriptor that is not an exec socket was left open")
	}
}
