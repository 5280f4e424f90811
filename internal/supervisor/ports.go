package supervisor

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file holds exposed ports: a connection from outside the sandbox,
// through the daemon, to a server on the sandbox's loopback (the E2B
// endpoints' getHost). The driver connects from inside the sandbox
// (sandbox.PortDialer); the template or the policy may forbid it; each
// connection is audited at its end with its bytes.

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
	pc := l.exposed.port(port)
	if s.ExposePorts(tmpl) == ExposeNone {
		pc.denied.Add(1)
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotExposable)
	}
	if err := s.exposeDecision(ctx, c, l, port); err != nil {
		pc.denied.Add(1)
		return nil, fmt.Errorf("sandbox %s port %d: %w", id, port, err)
	}
	pd, ok := inst.(sandbox.PortDialer)
	if !ok {
		pc.failed.Add(1)
		return nil, fmt.Errorf("sandbox %s: its driver cannot reach a port inside it: %w", id, sandbox.ErrUnsupported)
	}
	l.touch(s.opts.Now())
	ev := audit.Event{Kind: audit.KindExpose, Key: c.KeyID, Sandbox: id, Template: tmpl, Port: port, Host: host}
	conn, err := pd.DialPort(ctx, port)
	if err != nil {
		pc.failed.Add(1)
		ev.Error = err.Error()
		s.recordAfter(ctx, ev)
		return nil, err
	}
	pc.conns.Add(1)
	return &exposedConn{Conn: conn, pc: pc, done: func(sent, received int64) {
		ev.BytesSent, ev.BytesReceived = sent, received
		l.touch(s.opts.Now())
		s.recordAfter(context.Background(), ev)
	}}, nil
}

// exposedConn counts an exposed connection's bytes and reports them once,
// at Close. Sent is toward the sandbox.
type exposedConn struct {
	net.Conn
	pc             *portCount
	sent, received atomic.Int64
	once           sync.Once
	done           func(sent, received int64)
}

func (c *exposedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.received.Add(int64(n))
	c.pc.received.Add(int64(n))
	return n, err
}

func (c *exposedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.sent.Add(int64(n))
	c.pc.sent.Add(int64(n))
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

// exposeDecision asks the policy whether c, the sandbox's owner, may have
// port of sandbox l reached from outside: action "expose" with the port,
// the sandbox's template and driver, and c's key and labels. Each new
// connection is asked (a pooled one was asked when it was made). A
// connection cannot wait for a person, so ask refuses it, as on egress.
// A refusal (a *policy.Denied) is audited as a policy event; an admitted
// connection's expose event records it.
func (s *Supervisor) exposeDecision(ctx context.Context, c Caller, l *live, port int) error {
	r := l.request(policy.Request{Action: policy.ActionExpose, Port: port, Key: c.KeyID, Labels: c.Labels})
	d, err := s.policy.Decide(ctx, r)
	if err != nil {
		s.log.Error("policy evaluation failed; refusing the exposed port", "sandbox_id", r.Sandbox, "err", err)
		d = policy.Decision{Verdict: policy.Deny, Rule: d.Rule, Reason: "the policy could not be evaluated"}
	}
	switch d.Verdict {
	case policy.Allow:
		return nil
	case policy.Ask:
		d.Verdict, d.Reason = policy.Deny, d.Reason+" (a connection to an exposed port cannot wait for a person's approval, so asking refuses it)"
	}
	ev := s.auditEvent(audit.KindPolicy, c, r)
	ev.Port = port
	ev.Decision, ev.Rule, ev.Reason = string(d.Verdict), d.Rule, string(r.Action)+": "+d.Reason
	if err := s.record(ctx, ev); err != nil {
		return err
	}
	return &policy.Denied{Decision: d}
}

// exposedPorts counts a sandbox's exposed connections by port, for its
// summary (Supervisor.Egress).
type exposedPorts struct {
	mu    sync.Mutex
	ports map[int]*portCount
}

type portCount struct {
	conns, denied, failed, sent, received atomic.Int64
}

// maxExposedPorts bounds the ports counted apart; the others count as
// port 0.
const maxExposedPorts = 1000

func (e *exposedPorts) port(port int) *portCount {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ports == nil {
		e.ports = map[int]*portCount{}
	}
	pc := e.ports[port]
	if pc == nil {
		if len(e.ports) >= maxExposedPorts {
			port = 0
			if pc = e.ports[0]; pc != nil {
				return pc
			}
		}
		pc = &portCount{}
		e.ports[port] = pc
	}
	return pc
}

// summary is the counts by port, sorted by port; nil when none.
func (e *exposedPorts) summary() []egress.PortSummary {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ports) == 0 {
		return nil
	}
	out := make([]egress.PortSummary, 0, len(e.ports))
	for port, pc := range e.ports {
		out = append(out, egress.PortSummary{Port: port, Connections: pc.conns.Load(), Denied: pc.denied.Load(), Failed: pc.failed.Load(),
			BytesSent: pc.sent.Load(), BytesReceived: pc.received.Load()})
	}
	slices.SortFunc(out, func(a, b egress.PortSummary) int { return a.Port - b.Port })
	return out
}
