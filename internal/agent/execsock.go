package agent

import (
	"errors"
	"fmt"
)

// Exec sockets: where the agent shares the host's kernel (native), an
// exec need not be an HTTP/2 stream.
//
// The host makes a SOCK_SEQPACKET socketpair per exec, writes the exec's
// start on its end as the first packet, and passes the other end to the
// agent as SCM_RIGHTS on one byte (ExecSocketByte) that it writes on the
// session between two of HTTP/2's writes. A read of a unix stream socket
// ends with the byte that carried descriptors, so the agent, reading the
// session, takes the descriptor and drops that last byte before HTTP/2
// sees the bytes; it then serves the exec on the socket: one packet is
// one frame, whose first byte says what it
// holds (ExecFrame…) and the rest is the payload, so that output and
// stdin travel as raw bytes with no base64 and no HTTP/2 framing, and
// neither side's HTTP/2 goroutines are crossed. Each exec socket has its
// own buffers, so one exec whose output is not read blocks only itself.
//
// The agent says in Hello that it takes exec sockets (ExecSockets) only
// where its session is a unix socket; a host that sees no such answer (an
// older agent, or a driver whose transport cannot carry a descriptor)
// runs every exec on the HTTP/2 Exec stream, as does an attachment to an
// exec (reattach). The host closing its end is the end of the stream:
// the exec runs on, as when an HTTP/2 stream is reset. Signals stay the
// Signal call (and the host's own kill). docs/decisions.md, 70.

// ExecSocketByte is the byte that carries an exec socket on the session;
// the agent takes it out of the stream.
const ExecSocketByte = 0

// Kinds of exec frames: the first byte of each packet on an exec socket.
const (
	// ExecFrameJSON holds an ExecInput (host to agent) or an ExecEvent
	// (agent to host) as JSON.
	ExecFrameJSON = 'J'
	// ExecFrameStdin holds stdin data (host to agent).
	ExecFrameStdin = 'I'
	// ExecFrameStdout and ExecFrameStderr hold output (agent to host).
	ExecFrameStdout = 'O'
	ExecFrameStderr = 'E'
	// ExecFrameError ends the stream with an ExecError (agent to host).
	ExecFrameError = 'X'
)

// ExecFrameMax bounds one frame's bytes: a data frame is at most
// ChunkSize bytes of data and its kind.
const ExecFrameMax = 64 << 10

// ExecError is why the agent refused an exec, its class as WireError
// names it ("" for none).
type ExecError struct {
	Class   string `json:"class,omitempty"`
	Message string `json:"message"`
}

// ExecErrorOf describes err for the wire.
func ExecErrorOf(err error) ExecError {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return ExecError{Class: c.name, Message: err.Error()}
		}
	}
	return ExecError{Message: err.Error()}
}

// hostErr is the error the host makes of what the (untrusted) agent said.
func (e ExecError) hostErr() error {
	msg := e.Message
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	for _, c := range classes {
		if c.name == e.Class && e.Class != "" {
			return &classedError{msg: msg, class: c.err}
		}
	}
	return &classedError{msg: "agent: " + msg}
}

// errExecFrame is a frame the host cannot read.
var errExecFrame = fmt.Errorf("agent: a malformed frame on the exec socket")

// EnvExecSockets turns exec sockets off in the host ("0"): foreground execs
// then go by HTTP/2 streams. They are on otherwise (docs/decisions.md, 80;
// 78 had them off while the agent's threads grew with them).
const EnvExecSockets = "AIRLOCK_EXEC_SOCKETS"
