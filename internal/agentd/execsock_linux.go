package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// session prepares a host session's connection: the tunnel channel the
// host may offer on its first byte (tunnel_linux.go), and, on a unix
// socket, the exec sockets it may pass on any later byte (agent/execsock.go),
// each served as it arrives.
func (s *server) session(conn net.Conn) net.Conn {
	c := s.tun.takeOffer(conn)
	uc, isUnix := conn.(*net.UnixConn)
	rc, replayed := c.(*replayConn)
	if !isUnix || !replayed {
		s.execSockets.Store(false)
		return c
	}
	rc.Conn = &rightsReader{UnixConn: uc, oob: make([]byte, unix.CmsgSpace(4*4)), take: func(fd int) { go s.execSocket(fd) }}
	s.execSockets.Store(true)
	return rc
}

// rightsReader reads a session, taking the exec sockets that ride on it:
// a read that returns descriptors ends with the byte that carried them
// (agent.ExecSocketByte), which is not the session's and is dropped.
type rightsReader struct {
	*net.UnixConn
	oob  []byte
	take func(fd int)
}

func (r *rightsReader) Read(p []byte) (int, error) {
	for {
		n, oobn, flags, _, err := r.ReadMsgUnix(p, r.oob)
		if errors.Is(err, io.EOF) {
			// As the connection's Read says it.
			err = io.EOF
		}
		if oobn == 0 && flags&unix.MSG_CTRUNC == 0 {
			return n, err
		}
		if flags&unix.MSG_CTRUNC != 0 {
			closeRights(r.oob[:oobn])
		} else if msgs, perr := unix.ParseSocketControlMessage(r.oob[:oobn]); perr == nil {
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					for _, fd := range fds {
						r.take(fd)
					}
				}
			}
		}
		if n > 0 {
			n--
		}
		// A read of nothing but that byte reads on: a reader of the
		// session must not see a read of nothing.
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// execConn makes an exec socket of fd, a unix SOCK_SEQPACKET socket;
// anything else is closed.
func execConn(fd int) *net.UnixConn {
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_SEQPACKET {
		unix.Close(fd)
		return nil
	}
	return channelOf(fd)
}

// execSocket serves one exec on the socket the host passed: its first
// frame starts the command (an attachment goes by the Exec stream), later
// ones feed its input; the command's start, output and result go back as
// frames. The host closing the socket ends the following, not the exec.
// A first frame that is agent.ExecFrameTunnel alone makes the socket the
// session's tunnel channel instead (agent/lazytunnel.go).
func (s *server) execSocket(fd int) {
	c := execConn(fd)
	if c == nil {
		return
	}
	kept := false
	defer func() {
		if !kept {
			c.Close()
		}
	}()
	var sendMu sync.Mutex
	frame := make([]byte, 0, agent.ChunkSize+1)
	write := func(kind byte, data []byte) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		frame = append(append(frame[:0], kind), data...)
		_, err := c.Write(frame)
		return err
	}
	send := func(ev *agent.ExecEvent) error {
		switch {
		case len(ev.Stdout) > 0:
			return write(agent.ExecFrameStdout, ev.Stdout)
		case len(ev.Stderr) > 0:
			return write(agent.ExecFrameStderr, ev.Stderr)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		return write(agent.ExecFrameJSON, b)
	}
	refuse := func(err error) {
		b, _ := json.Marshal(agent.ExecErrorOf(err))
		_ = write(agent.ExecFrameError, b)
	}
	buf := make([]byte, agent.ExecFrameMax+1)
	recv := func() (*agent.ExecInput, error) {
		n, _, flags, _, err := c.ReadMsgUnix(buf, nil)
		switch {
		case err != nil:
			return nil, err
		case flags&unix.MSG_TRUNC != 0 || n == 0 || n > agent.ExecFrameMax:
			return nil, errors.New("a malformed frame")
		case buf[0] == agent.ExecFrameTunnel && n == 1:
			return nil, errTunnelFrame
		case buf[0] == agent.ExecFrameStdin:
			return &agent.ExecInput{Stdin: buf[1:n]}, nil
		case buf[0] == agent.ExecFrameJSON:
			var in agent.ExecInput
			if err := json.Unmarshal(buf[1:n], &in); err != nil {
				return nil, err
			}
			return &in, nil
		}
		return nil, errors.New("a frame of an unknown kind")
	}
	first, err := recv()
	if errors.Is(err, errTunnelFrame) {
		kept = true
		s.tun.set(c)
		return
	}
	if err != nil {
		refuse(fmt.Errorf("the exec socket's first frame: %w: %w", err, sandbox.ErrInvalid))
		return
	}
	st := first.Start
	if st == nil || !sandbox.ValidID(st.ID) {
		refuse(fmt.Errorf("%w: %w", errNoStart, sandbox.ErrInvalid))
		return
	}
	if err := (sandbox.ExecRequest{Argv: st.Argv, Env: st.Env, Dir: st.Dir}).Validate(); err != nil {
		refuse(err)
		return
	}
	es, att, err := s.startExec(st)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			_ = send(&agent.ExecEvent{Exit: &sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, Message: ce.Msg, LimitsHit: []sandbox.Limit{}}})
			return
		}
		refuse(err)
		return
	}
	if err := send(&agent.ExecEvent{Started: es.p.pid, Cgroup: es.p.cgroupName}); err != nil {
		es.detach(att)
		return
	}
	// The host's end closing (the socket reads its end) stops the
	// following; until then what it sends feeds the exec's input, and,
	// once it has the result, says to forget the exec.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := make(chan struct{})
	input := func() (*agent.ExecInput, error) {
		in, err := recv()
		if err == nil && in.Forget {
			s.eng.execs.forget(es.id)
		}
		return in, err
	}
	go func() {
		defer close(read)
		defer cancel()
		if es.eio.input != nil {
			s.feed(input, es)
		}
		for {
			if _, err := input(); err != nil {
				return
			}
		}
	}()
	if s.follow(ctx, send, es, att, make([]int64, len(es.rings))) == nil {
		// The result is sent: the host's forget follows, then its close.
		select {
		case <-read:
		case <-time.After(forgetWait):
		}
	}
}

// errTunnelFrame is a socket's first frame that makes it the tunnel
// channel; anywhere else it is a malformed frame.
var errTunnelFrame = errors.New("a tunnel frame")

// forgetWait is how long an exec socket stays open after the result for
// the host's forget; past it the exec is kept as one no stream follows.
const forgetWait = 10 * time.Second
