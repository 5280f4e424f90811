package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Sessions of a virtual machine's agent over its one port (the microvm
// driver's pause, resume and live fork).
//
// A machine's agent serves one host session on its virtio-serial port.
// To save the machine with its memory the host first asks the agent to
// suspend the session (ProcSuspend, with a token): the agent stops
// reading the session and reads the port for a resume line instead,
// dropping whatever the old host still sends. The machine is then saved
// and its QEMU ends. A machine restored from that image (the next QEMU,
// with a new port connection) gets from its host the resume line,
//
//	"\n" ResumeLine token " " <GuestRefresh as JSON> "\n"
//
// and the agent sets the guest's clock, entropy (and, for a clone, its
// identity) from it, answers ResumedLine token "\n", and serves a new
// HTTP/2 session from the next byte. The host drops what comes before
// that answer (the old session's last frames may still be in the port's
// queue). A random token cannot occur in an HTTP/2 stream by chance.

// ProcSuspend asks a virtual machine's agent to suspend its host session.
// Agents that are not a machine's (and those before pause) answer
// Unimplemented.
const ProcSuspend = service + "Suspend"

// Lines of the resume exchange on a machine's port.
const (
	ResumeLine  = "airlock-resume "
	ResumedLine = "airlock-resumed "
)

// maxResumeLine bounds the host's resume line (the refresh is small).
const maxResumeLine = 16 << 10

// SuspendRequest carries the token the host will resume with: 32 hex
// digits.
type SuspendRequest struct {
	Token string `json:"token"`
}

// GuestRefresh is what a resumed machine's guest takes on: the host's
// clock and fresh entropy always; for a clone (a live fork), a host name
// and machine id of its own.
type GuestRefresh struct {
	Seed         []byte `json:"seed"`
	TimeUnixNano int64  `json:"time_unix_nano"`
	Hostname     string `json:"hostname,omitempty"`
	MachineID    string `json:"machine_id,omitempty"`
}

// Suspend asks the agent to suspend this session for a save of its
// machine, to be resumed with token. An agent without pause is
// ErrUnsupportedSuspend.
func (c *Client) Suspend(ctx context.Context, token string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.suspend.get().CallUnary(ctx, connect.NewRequest(&SuspendRequest{Token: token}))
	if connect.CodeOf(err) == connect.CodeUnimplemented || connect.CodeOf(err) == connect.CodeNotFound {
		return ErrUnsupportedSuspend
	}
	return callError(ctx, "suspend the agent's session", err)
}

// ErrUnsupportedSuspend is an agent that cannot suspend its session.
var ErrUnsupportedSuspend = errors.New("the sandbox's agent cannot suspend its session (it predates pause, or is no virtual machine's)")

// WriteResume writes the host's resume line for token and refresh on c.
func WriteResume(c io.Writer, token string, refresh *GuestRefresh) error {
	b, err := json.Marshal(refresh)
	if err != nil {
		return err
	}
	b = append(append([]byte("\n"+ResumeLine+token+" "), b...), '\n')
	_, err = c.Write(b)
	return err
}

// AwaitResumed reads c until the agent's answer to the resume line of
// token, byte by byte so that nothing after it is taken from the session
// that follows. What comes before it is dropped, up to limit bytes.
func AwaitResumed(c io.Reader, token string, limit int64) error {
	want := []byte(ResumedLine + token + "\n")
	got := make([]byte, 0, len(want))
	var b [1]byte
	for n := int64(0); ; n++ {
		if n > limit {
			return fmt.Errorf("the agent did not answer the resume within %d bytes", limit)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return fmt.Errorf("read the agent's answer to the resume: %w", err)
		}
		got = append(got, b[0])
		for !bytes.HasPrefix(want, got) {
			got = got[1:]
		}
		if len(got) == len(want) {
			return nil
		}
	}
}

// ReadResume reads r until the resume line of token and returns its
// refresh. What comes before it is dropped. r's end of file means no host
// is connected yet, and is read again after wait.
func ReadResume(r io.Reader, token string, wait time.Duration) (*GuestRefresh, error) {
	want := []byte("\n" + ResumeLine + token + " ")
	var got []byte
	var b [1]byte
	var line []byte
	for {
		n, err := r.Read(b[:])
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				time.Sleep(wait)
				continue
			}
			return nil, err
		}
		if len(got) < len(want) {
			got = append(got, b[0])
			for !bytes.HasPrefix(want, got) {
				got = got[1:]
			}
			continue
		}
		if b[0] == '\n' {
			var ref GuestRefresh
			if err := json.Unmarshal(line, &ref); err != nil {
				return nil, fmt.Errorf("read the host's resume line: %w", err)
			}
			return &ref, nil
		}
		if line = append(line, b[0]); len(line) > maxResumeLine {
			return nil, errors.New("the host's resume line is too long")
		}
	}
}

// SessionConn is one session over a connection that outlives it (a
// machine's port): closing it ends the session, not the connection.
type SessionConn struct {
	net.Conn
	mu      sync.Mutex
	reading int
	stopped bool
	ended   chan struct{}
	endOnce sync.Once
	// stopOnce makes Stop touch the connection once: a later Stop or
	// Close (the session's HTTP/2 connection closes it again when its
	// read returns end of file, at whatever time that goroutine runs)
	// comes when the next session may be reading the connection, and
	// setting its read deadline then broke that session's read.
	stopOnce sync.Once
	wmu      *sync.Mutex
}

// NewSession returns a session over c; wmu, shared by the sessions of
// one connection, keeps their writes apart.
func NewSession(c net.Conn, wmu *sync.Mutex) *SessionConn {
	return &SessionConn{Conn: c, ended: make(chan struct{}), wmu: wmu}
}

// Read reads the connection until the session is stopped; then it waits
// for its end and reads end of file.
func (s *SessionConn) Read(p []byte) (int, error) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.ended
		return 0, io.EOF
	}
	s.reading++
	s.mu.Unlock()
	n, err := s.Conn.Read(p)
	s.mu.Lock()
	s.reading--
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		<-s.ended
		return 0, io.EOF
	}
	return n, err
}

// Write writes to the connection while the session lasts.
func (s *SessionConn) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	select {
	case <-s.ended:
		return 0, net.ErrClosed
	default:
	}
	return s.Conn.Write(p)
}

// Stop stops the session's reading: a read under way returns (what it
// read is dropped), later ones wait for End. Writes go on. It returns once
// no read of the session is on the connection, which is then the
// caller's to read.
// A second Stop (or End, or Close) waits for the first and does nothing
// more: once the first has returned, the connection is no longer the
// session's, and the next session may be reading it.
func (s *SessionConn) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		for {
			_ = s.Conn.SetReadDeadline(time.Now())
			s.mu.Lock()
			n := s.reading
			s.mu.Unlock()
			if n == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_ = s.Conn.SetReadDeadline(time.Time{})
	})
}

// End ends the session: its reads return end of file, its writes fail.
func (s *SessionConn) End() {
	s.Stop()
	s.wmu.Lock()
	s.endOnce.Do(func() { close(s.ended) })
	s.wmu.Unlock()
}

// Close ends the session and leaves the connection open.
func (s *SessionConn) Close() error {
	s.End()
	return nil
}
