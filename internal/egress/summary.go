package egress

import (
	"errors"
	"net"
	"slices"
	"sync/atomic"
)

// Summary is what one sandbox did through the proxy.
type Summary struct {
	SandboxID string `json:"sandbox_id"`
	// Mode is "enforce" or "report"; "none" for a sandbox without egress
	// whose summary holds its exposed ports alone.
	Mode string `json:"mode"`
	// Requests counts HTTP requests and CONNECTs; Allowed + Denied +
	// WouldDeny = Requests.
	Requests  int64 `json:"requests"`
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	WouldDeny int64 `json:"would_deny"`
	// BytesSent and BytesReceived count bytes to and from destinations.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// Hosts breaks the counts down by requested host, sorted by name.
	Hosts []HostSummary `json:"hosts"`
	// Exposed counts the connections from outside to the sandbox's
	// exposed ports (E2B's getHost), by port; absent when none was asked
	// for. The daemon fills it, not the proxy.
	Exposed []PortSummary `json:"exposed,omitempty"`
}

// PortSummary is what reached one exposed port of a sandbox from outside.
type PortSummary struct {
	Port int `json:"port"`
	// Connections reached a server on the port; Denied were refused by
	// the policy or the template; Failed found no server listening (or
	// could not be made).
	Connections int64 `json:"connections"`
	Denied      int64 `json:"denied"`
	Failed      int64 `json:"failed"`
	// BytesSent went to the sandbox's server, BytesReceived came from it,
	// counted as they pass.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
}

// HostSummary is what one sandbox did with one host.
type HostSummary struct {
	Host          string `json:"host"`
	Allowed       int64  `json:"allowed"`
	Denied        int64  `json:"denied"`
	WouldDeny     int64  `json:"would_deny"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
}

// maxHosts bounds the per-host breakdown; later hosts count as otherHost.
const (
	maxHosts  = 1000
	otherHost = "(other)"
)

func (s *Sandbox) record(d *decision, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hosts[d.host]
	if h == nil {
		key := d.host
		if len(s.hosts) >= maxHosts {
			key = otherHost
		}
		if h = s.hosts[key]; h == nil {
			h = &HostSummary{Host: key}
			s.hosts[key] = h
		}
	}
	s.sum.Requests++
	switch outcome {
	case "allow":
		s.sum.Allowed++
		h.Allowed++
	case "deny":
		s.sum.Denied++
		h.Denied++
	default:
		s.sum.WouldDeny++
		h.WouldDeny++
	}
	h.BytesSent += d.sent
	h.BytesReceived += d.recv
}

// Summary returns what the sandbox did so far.
func (s *Sandbox) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.sum
	sum.SandboxID = s.id
	sum.Mode = "enforce"
	if s.rules.Load().report {
		sum.Mode = "report"
	}
	sum.BytesSent, sum.BytesReceived = s.sent.Load(), s.recv.Load()
	sum.Hosts = make([]HostSummary, 0, len(s.hosts))
	for _, h := range s.hosts {
		sum.Hosts = append(sum.Hosts, *h)
	}
	slices.SortFunc(sum.Hosts, func(a, b HostSummary) int {
		switch {
		case a.Host < b.Host:
			return -1
		case a.Host > b.Host:
			return 1
		}
		return 0
	})
	return sum
}

func (s *Sandbox) bytesUsed() int64 { return s.sent.Load() + s.recv.Load() }

// bytesLeft is what is left of the byte budget, less what splice rounds
// have reserved (splice.go).
func (s *Sandbox) bytesLeft() int64 {
	return s.p.opts.Limits.MaxBytes - s.bytesUsed() - s.reserved.Load()
}

// errBudget ends a connection whose sandbox spent its byte budget.
var errBudget = errors.New("egress byte budget spent")

// countedConn counts a destination connection's bytes against the
// sandbox's budget and the request's decision, and fails once the budget
// is spent.
type countedConn struct {
	net.Conn
	s *Sandbox
	d *decision
}

func (s *Sandbox) counted(c net.Conn, d *decision) *countedConn {
	return &countedConn{Conn: c, s: s, d: d}
}

func (c *countedConn) Read(p []byte) (int, error) {
	left := c.s.bytesLeft()
	if left <= 0 {
		return 0, errBudget
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.Conn.Read(p)
	c.s.recv.Add(int64(n))
	atomic.AddInt64(&c.d.recv, int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	left := c.s.bytesLeft()
	if left <= 0 {
		return 0, errBudget
	}
	var err error
	if int64(len(p)) > left {
		p, err = p[:left], errBudget
	}
	n, werr := c.Conn.Write(p)
	c.s.sent.Add(int64(n))
	atomic.AddInt64(&c.d.sent, int64(n))
	if werr != nil {
		err = werr
	}
	return n, err
}

// Reporter is implemented by sandbox instances that can say what they did
// through the egress proxy; ok is false when the sandbox has no egress.
type Reporter interface {
	EgressSummary() (sum Summary, ok bool)
}
