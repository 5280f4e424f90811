package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// openSocketExec runs first's exec on an exec socket of its own
// (execsock.go): the start is written on the host's end, the agent's end
// passed on the session, and the first event read back. ctx ending
// closes the socket, which ends the stream as a reset does.
func (c *Client) openSocketExec(ctx context.Context, first *ExecInput, pty bool, what string) (*Exec, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: make its socket: %w", what, err)
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "exec")
	agentEnd := os.NewFile(uintptr(fds[1]), "exec")
	fc, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		agentEnd.Close()
		return nil, fmt.Errorf("%s: make its socket: %w", what, err)
	}
	st := &sockStream{c: fc.(*net.UnixConn), buf: make([]byte, ExecFrameMax+1), rc: c.rc}
	if !c.rc.track(st) {
		agentEnd.Close()
		st.CloseResponse()
		return nil, fmt.Errorf("%s: %w", what, net.ErrClosed)
	}
	if err := st.Send(first); err != nil {
		agentEnd.Close()
		st.CloseResponse()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	st.stop = context.AfterFunc(ctx, func() { st.CloseResponse() })
	err = c.rc.passExec(agentEnd)
	agentEnd.Close()
	if err != nil {
		st.CloseResponse()
		return nil, fmt.Errorf("%s: pass its socket: %w", what, err)
	}
	ex, err := started(st, pty, what)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
	return ex, err
}

// track adds st to the exec sockets open; false once the client closed.
func (c *rightsConn) track(st *sockStream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.execs == nil {
		c.execs = map[*sockStream]struct{}{}
	}
	c.execs[st] = struct{}{}
	return true
}

// closeExecs closes every exec socket open, as closing the session ends
// every HTTP/2 stream: the execs run on in the agent.
func (c *rightsConn) closeExecs() {
	c.mu.Lock()
	c.closed = true
	execs := c.execs
	c.execs = nil
	c.mu.Unlock()
	for st := range execs {
		st.CloseResponse()
	}
}

// sockStream is the host's end of an exec socket.
type sockStream struct {
	c    *net.UnixConn
	rc   *rightsConn
	stop func() bool
	// buf holds the frame being read; one larger than a frame may be, so
	// that a larger one shows as truncated.
	buf      []byte
	inClosed atomic.Bool
	once     sync.Once
}

func (s *sockStream) Send(in *ExecInput) error {
	if s.inClosed.Load() && !in.Forget {
		return errors.New("the exec's input is closed")
	}
	if len(in.Stdin) > 0 && in.Start == nil && in.Attach == nil && in.Resize == nil {
		if _, err := s.c.Write(append([]byte{ExecFrameStdin}, in.Stdin...)); err != nil {
			return err
		}
		if !in.StdinEOF {
			return nil
		}
		in = &ExecInput{StdinEOF: true}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	_, err = s.c.Write(append([]byte{ExecFrameJSON}, b...))
	return err
}

// CloseRequest ends the input half. Nothing is sent: the agent reads
// input only from an exec that has some (stdin or a terminal), and the
// end of stdin is a frame of its own.
func (s *sockStream) CloseRequest() error {
	s.inClosed.Store(true)
	return nil
}

// Receive reads the agent's next frame. The agent is untrusted: a frame
// larger than ExecFrameMax, or one that does not parse, ends the stream;
// a descriptor it sends is never received (no room is given for one, so
// the kernel closes it).
func (s *sockStream) Receive() (*ExecEvent, error) {
	n, _, flags, _, err := s.c.ReadMsgUnix(s.buf, nil)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, io.EOF
		}
		return nil, err
	}
	if flags&unix.MSG_TRUNC != 0 || n > ExecFrameMax || n == 0 {
		return nil, errExecFrame
	}
	data := s.buf[1:n]
	switch s.buf[0] {
	case ExecFrameStdout:
		return &ExecEvent{Stdout: bytes.Clone(data)}, nil
	case ExecFrameStderr:
		return &ExecEvent{Stderr: bytes.Clone(data)}, nil
	case ExecFrameJSON:
		var ev ExecEvent
		if err := json.Unmarshal(data, &ev); err != nil || len(ev.Stdout) > 0 || len(ev.Stderr) > 0 {
			return nil, errExecFrame
		}
		return &ev, nil
	case ExecFrameError:
		var e ExecError
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, errExecFrame
		}
		return nil, e.hostErr()
	}
	return nil, errExecFrame
}

// CloseResponse closes the socket: the end of the stream.
func (s *sockStream) CloseResponse() error {
	s.once.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		s.c.Close()
		if s.rc == nil {
			return
		}
		s.rc.mu.Lock()
		delete(s.rc.execs, s)
		s.rc.mu.Unlock()
	})
	return nil
}

// RunSocket is the host's end of a one-shot run's exec socket
// (Config.RunSocket): the command's start is written on it before the
// agent runs, and the agent serves it as soon as the sandbox is built.
type RunSocket struct {
	st  *sockStream
	pty bool
}

// NewRunSocket makes the exec socket of the command s and writes its start
// on the host's end; the agent's end, returned, is handed to the agent at
// its start.
func NewRunSocket(s *ExecStart) (*RunSocket, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("make the command's socket: %w", err)
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "exec")
	agentEnd := os.NewFile(uintptr(fds[1]), "exec")
	fc, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		agentEnd.Close()
		return nil, nil, fmt.Errorf("make the command's socket: %w", err)
	}
	r := &RunSocket{st: &sockStream{c: fc.(*net.UnixConn), buf: make([]byte, ExecFrameMax+1)}, pty: s.PTY != nil}
	if err := r.st.Send(&ExecInput{Start: s}); err != nil {
		agentEnd.Close()
		r.Close()
		return nil, nil, fmt.Errorf("write the command's start: %w", err)
	}
	return r, agentEnd, nil
}

// Open follows the command once c, the sandbox's client, is dialled: it
// returns once the command runs, as StartExec does. ctx ending closes the
// socket.
func (r *RunSocket) Open(ctx context.Context, c *Client) (*Exec, error) {
	if c.rc != nil {
		r.st.rc = c.rc
		if !c.rc.track(r.st) {
			r.Close()
			return nil, fmt.Errorf("start exec: %w", net.ErrClosed)
		}
	}
	r.st.stop = context.AfterFunc(ctx, func() { r.st.CloseResponse() })
	ex, err := started(r.st, r.pty, "start exec")
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("start exec: %w", ctx.Err())
	}
	return ex, err
}

// Close closes the socket: a command not followed yet runs on, unfollowed,
// as one whose stream the host reset.
func (r *RunSocket) Close() { r.st.CloseResponse() }
