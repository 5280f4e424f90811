package supervisor

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file holds exposed ports: a connection from outside the sandbox,
// through the daemon, to a server on the sandbox's loopback (the E2B
// endpoints' getHost). The driver connects from inside the sandbox
// (sandbox.PortDialer); the template may forbid it; each connection is
// audited at its end with its bytes.

// Template.ExposePorts's values.
const (
	ExposeAll   = "all"
	ExposeToken = "token"
	ExposeNone  = "none"
)

// ErrNotExposable says that the sandbox's template forbids exposed ports.
var ErrNotExposable = fmt.Errorf("%w: the sandbox's template does not expose ports (expose_ports = \"none\")", sandbox.ErrUnsupported)

// ExposePorts is who may reach the ports of sandboxes of template tmpl
// (Template.ExposePorts): ExposeAll, ExposeToken or ExposeNone.
func (s *Supervisor) ExposePorts(tmpl string) string {
	if t, ok := s.templates[tmpl]; ok && t.ExposePorts != "" {
		return t.ExposePorts
	}
	return ExposeAll
}

// DialPort connects to port on the loopback of the live sandbox id, for
// caller c (the sandbox's owner: whoever may reach the port was checked
// before). host is the name the connection was asked by, for the audit
// log. The connection counts as activity of the sandbox; its end is
// audited with the bytes each way. An error wrapping sandbox.ErrPortClosed
// says nothing listens on the port.
func (s *Supervisor) DialPort(ctx context.Context, c Caller, id string, port int, host string) (net.Conn, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	inst, tmpl := l.inst, l.rec.Template
	l.mu.Unlock()
	if s.ExposePorts(tmpl) == ExposeNone {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotExposable)
	}
	pd, ok := inst.(sandbox.PortDialer)
	if !ok {
		return nil, fmt.Errorf("sandbox %s: its driver cannot reach a port inside it: %w", id, sandbox.ErrUnsupported)
	}
	l.touch(s.opts.Now())
	ev := audit.Event{Kind: audit.KindExpose, Key: c.KeyID, Sandbox: id, Template: tmpl, Port: port, Host: host}
	conn, err := pd.DialPort(ctx, port)
	if err != nil {
		ev.Error = err.Error()
		s.recordAfter(ctx, ev)
		return nil, err
	}
	return &exposedConn{Conn: conn, done: func(sent, received int64) {
		ev.BytesSent, ev.BytesReceived = sent, received
		l.touch(s.opts.Now())
		s.recordAfter(context.Background(), ev)
	}}, nil
}

// exposedConn counts an exposed connection's bytes and reports them once,
// at Close. Sent is toward the sandbox.
type exposedConn struct {
	net.Conn
	sent, received atomic.Int64
	once           sync.Once
	done           func(sent, received int64)
}

func (c *exposedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received.Add(int64(n))
	return n, err
}

func (c *exposedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

// CloseWrite passes a half-close on, where the connection has one.
func (c *exposedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *exposedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.done(c.sent.Load(), c.received.Load()) })
	return err
}
