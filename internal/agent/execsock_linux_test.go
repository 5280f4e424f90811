package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// execSockPair returns the host's stream on an exec socket and the
// agent's end of it.
func execSockPair(t *testing.T) (*sockStream, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "exec")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	st := &sockStream{c: conn(fds[0]), buf: make([]byte, ExecFrameMax+1), rc: &rightsConn{}}
	agentEnd := conn(fds[1])
	t.Cleanup(func() { st.CloseResponse(); agentEnd.Close() })
	return st, agentEnd
}

func frame(kind byte, v any) []byte {
	if b, ok := v.([]byte); ok {
		return append([]byte{kind}, b...)
	}
	b, _ := json.Marshal(v)
	return append([]byte{kind}, b...)
}

// TestSockStream: the host reads the agent's frames as the events an
// HTTP/2 stream would carry, and sends its input as frames.
func TestSockStream(t *testing.T) {
	st, ag := execSockPair(t)
	out := bytes.Repeat([]byte("x"), ChunkSize)
	for _, f := range [][]byte{
		frame(ExecFrameJSON, ExecEvent{Started: 7, Cgroup: "e1"}),
		frame(ExecFrameStdout, out),
		frame(ExecFrameStderr, []byte("err")),
		frame(ExecFrameJSON, ExecEvent{Exit: &sandbox.Result{ExitCode: 3}}),
	} {
		if _, err := ag.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := started(st, false, "start exec")
	if err != nil || ex.Pid != 7 || ex.Cgroup != "e1" {
		t.Fatalf("started: %+v, %v", ex, err)
	}
	if ev, err := ex.Next(); err != nil || !bytes.Equal(ev.Stdout, out) {
		t.Fatalf("stdout: %d bytes, %v", len(ev.Stdout), err)
	}
	if ev, err := ex.Next(); err != nil || string(ev.Stderr) != "err" {
		t.Fatalf("stderr: %+v, %v", ev, err)
	}
	if ev, err := ex.Next(); err != nil || ev.Exit == nil || ev.Exit.ExitCode != 3 {
		t.Fatalf("exit: %+v, %v", ev, err)
	}

	// Input: stdin as raw data, its end and resizes as JSON.
	st2, ag2 := execSockPair(t)
	ex2 := &Exec{stream: st2}
	if err := ex2.SendStdin([]byte("abc"), true); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, ExecFrameMax)
	n, _ := ag2.Read(buf)
	if string(buf[:n]) != "Iabc" {
		t.Errorf("stdin frame %q, want %q", buf[:n], "Iabc")
	}
	n, _ = ag2.Read(buf)
	var in ExecInput
	if buf[0] != ExecFrameJSON || json.Unmarshal(buf[1:n], &in) != nil || !in.StdinEOF {
		t.Errorf("end of stdin frame %q", buf[:n])
	}
	if err := ex2.SendStdin([]byte("more"), false); err == nil {
		t.Error("stdin sent after its end")
	}
}

// TestSockStreamUntrusted: what the agent sends on an exec socket is
// untrusted. A frame too large, of an unknown kind, or JSON carrying
// output ends the stream; an error frame is classified with its message
// cut; a descriptor the agent sends along never reaches the host.
func TestSockStreamUntrusted(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		want  func(error) bool
	}{
		{"too large", append([]byte{ExecFrameStdout}, make([]byte, ExecFrameMax)...), func(err error) bool { return errors.Is(err, errExecFrame) }},
		{"unknown kind", []byte("Zhello"), func(err error) bool { return errors.Is(err, errExecFrame) }},
		{"output in JSON", frame(ExecFrameJSON, ExecEvent{Stdout: []byte("x")}), func(err error) bool { return errors.Is(err, errExecFrame) }},
		{"bad JSON", []byte("J{"), func(err error) bool { return errors.Is(err, errExecFrame) }},
		{"an error", frame(ExecFrameError, ExecError{Class: "not_found", Message: string(bytes.Repeat([]byte("m"), 2000))}), func(err error) bool {
			return errors.Is(err, sandbox.ErrNotFound) && len(err.Error()) < 600
		}},
		{"the end", nil, func(err error) bool { return errors.Is(err, io.EOF) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ag := execSockPair(t)
			if tt.frame == nil {
				ag.Close()
			} else if _, err := ag.Write(tt.frame); err != nil {
				t.Fatal(err)
			}
			ev, err := st.Receive()
			if !tt.want(err) {
				t.Errorf("Receive: %+v, %v", ev, err)
			}
		})
	}
	t.Run("a descriptor", func(t *testing.T) {
		st, ag := execSockPair(t)
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		before := openFDs(t)
		if _, _, err := ag.WriteMsgUnix(frame(ExecFrameStdout, []byte("x")), unix.UnixRights(int(f.Fd())), nil); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if ev, err := st.Receive(); err != nil || string(ev.Stdout) != "x" {
			t.Fatalf("Receive: %+v, %v", ev, err)
		}
		if after := openFDs(t); after > before-1 {
			t.Errorf("%d descriptors open after the frame, %d before (one since closed): the agent's was received", after, before)
		}
	})
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestRightsConn: the tunnel offer rides on the session's first byte;
// an exec socket on a byte of its own, between whole writes.
func TestRightsConn(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sess")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	host, ag := conn(fds[0]), conn(fds[1])
	defer host.Close()
	defer ag.Close()
	open := func() *os.File {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	rc := &rightsConn{UnixConn: host, offer: open()}
	if n, err := rc.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	f := open()
	if err := rc.passExec(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if n, err := rc.Write([]byte("world")); n != 5 || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	// What the agent reads: each read that brings a descriptor ends with
	// the byte that carried it.
	type read struct {
		data string
		fds  int
	}
	var got []read
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	total := 0
	for total < 11 {
		n, oobn, _, _, err := ag.ReadMsgUnix(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		r := rights(oob[:oobn])
		closeFDs(r)
		got = append(got, read{string(buf[:n]), len(r)})
		total += n
	}
	want := []read{{"h", 1}, {"ello\x00", 1}, {"world", 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the agent read %+v, want %+v", got, want)
	}
}
