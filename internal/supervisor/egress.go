package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TemplateNetwork is a template's network: the default of its sandboxes
// and the ceiling of what a create may ask for.
//
//	[template.network]
//	mode = "egress"                        # default "none"
//	allow_hosts = ["*.pypi.org:443", "files.pythonhosted.org"]
//	allow_addresses = ["10.1.2.3:443"]
//	deny = ["evil.pypi.org"]
//	report = false                         # true lets creates ask for report mode
type TemplateNetwork struct {
	Mode           string   `toml:"mode"`
	AllowHosts     []string `toml:"allow_hosts"`
	AllowAddresses []string `toml:"allow_addresses"`
	Deny           []string `toml:"deny"`
	Report         bool     `toml:"report"`
}

// EgressConfig configures the daemon's egress proxy.
//
//	[egress]
//	requests_per_second = 20   # per sandbox
//	burst = 40
//	max_conns = 32             # concurrent connections per sandbox
//	max_bytes = "1G"           # per sandbox, both directions
//
//	[[egress.secret]]          # added to plain-HTTP GET, HEAD, POST, PUT, PATCH and DELETE only
//	host = "api.example.com"
//	header = "Authorization"
//	value = "Bearer ..."
type EgressConfig struct {
	RequestsPerSecond float64        `toml:"requests_per_second"`
	Burst             int            `toml:"burst"`
	MaxConns          int            `toml:"max_conns"`
	MaxBytes          Size           `toml:"max_bytes"`
	Secrets           []EgressSecret `toml:"secret"`
}

// EgressSecret binds a header to a host.
type EgressSecret struct {
	Host   string             `toml:"host"`
	Header string             `toml:"header"`
	Value  egress.SecretValue `toml:"value"`
}

// ProxyOptions returns the egress proxy's options for this configuration.
func (c EgressConfig) ProxyOptions(log *slog.Logger) egress.Options {
	o := egress.Options{Logger: log, Limits: egress.Limits{
		RequestsPerSecond: c.RequestsPerSecond, Burst: c.Burst, MaxConns: c.MaxConns, MaxBytes: int64(c.MaxBytes),
	}}
	for _, s := range c.Secrets {
		o.Secrets = append(o.Secrets, egress.Secret{Host: s.Host, Header: s.Header, Value: s.Value})
	}
	return o
}

// check says what is wrong with the egress section.
func (c EgressConfig) check() error {
	for _, l := range []struct {
		key string
		v   float64
	}{{"requests_per_second", c.RequestsPerSecond}, {"burst", float64(c.Burst)}, {"max_conns", float64(c.MaxConns)}, {"max_bytes", float64(c.MaxBytes)}} {
		if l.v < 0 {
			return keyErr("egress."+l.key, fmt.Errorf("egress limits cannot be negative"))
		}
	}
	for i, s := range c.Secrets {
		key := func(k string) string { return fmt.Sprintf("egress.secret[%d].%s", i, k) }
		if _, _, err := sandbox.ParseHostPattern(s.Host); err != nil || strings.ContainsAny(s.Host, "*:") {
			return keyErr(key("host"), fmt.Errorf("egress secret for %q: give one host name, without wildcard or port", s.Host))
		}
		if s.Header == "" || strings.ContainsAny(s.Header, " :\r\n") {
			return keyErr(key("header"), fmt.Errorf("egress secret for %q: give a header name", s.Host))
		}
		if strings.ContainsAny(string(s.Value), "\r\n") {
			return keyErr(key("value"), fmt.Errorf("egress secret for %q: give a one-line value", s.Host))
		}
	}
	return nil
}

// defaultNetwork is the network of the template's sandboxes when a create
// does not ask for one.
func (n TemplateNetwork) defaultNetwork() sandbox.Network {
	mode := sandbox.NetworkMode(n.Mode)
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	if mode == sandbox.NetworkNone {
		return sandbox.Network{Mode: mode}
	}
	return sandbox.Network{
		Mode: mode, AllowHosts: slices.Clone(n.AllowHosts), AllowAddresses: slices.Clone(n.AllowAddresses),
		Deny: slices.Clone(n.Deny),
	}
}

// zeroNetwork reports whether a create leaves the network to the template.
func zeroNetwork(n sandbox.Network) bool {
	return n.Mode == "" && len(n.AllowHosts) == 0 && len(n.AllowAddresses) == 0 && len(n.Deny) == 0 && !n.Report
}

// network returns the network a create gets: the template's when it asks
// for none, else what it asks for if the template allows all of it. A
// request asking for more is refused, not trimmed. The template's deny
// rules always apply.
func (t Template) network(req sandbox.Network) (sandbox.Network, error) {
	n := t.Network.defaultNetwork()
	if zeroNetwork(req) {
		return n, nil
	}
	if req.Mode == "" && (len(req.AllowHosts) > 0 || len(req.AllowAddresses) > 0 || req.Report) {
		req.Mode = sandbox.NetworkEgress
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	refuse := func(what string) (sandbox.Network, error) {
		return req, fmt.Errorf("%w: network %s: template %q does not allow it", sandbox.ErrInvalid, what, t.Name)
	}
	if req.Mode == sandbox.NetworkNone || req.Mode == "" {
		return sandbox.Network{Mode: sandbox.NetworkNone}, nil
	}
	if sandbox.NetworkMode(t.Network.Mode) != sandbox.NetworkEgress {
		return refuse("mode egress")
	}
	if req.Report && !t.Network.Report {
		return refuse("report mode")
	}
	for _, h := range req.AllowHosts {
		if !sandbox.PatternCovered(h, t.Network.AllowHosts) {
			return refuse(fmt.Sprintf("allow host %q", h))
		}
	}
	for _, a := range req.AllowAddresses {
		if !slices.Contains(t.Network.AllowAddresses, a) {
			return refuse(fmt.Sprintf("allow address %q", a))
		}
	}
	req.Deny = append(slices.Clone(req.Deny), t.Network.Deny...)
	return req, nil
}

// Egress says what sandbox id did through the egress proxy.
func (s *Supervisor) Egress(_ context.Context, c Caller, id string) (egress.Summary, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return egress.Summary{}, err
	}
	l.mu.Lock()
	inst := l.inst
	l.mu.Unlock()
	if r, ok := inst.(egress.Reporter); ok {
		if sum, ok := r.EgressSummary(); ok {
			return sum, nil
		}
	}
	return egress.Summary{}, fmt.Errorf("sandbox %s has no egress (network mode none): %w", id, sandbox.ErrNotFound)
}

// check validates the template's network as written.
func (n TemplateNetwork) check() error {
	return sandbox.Network{
		Mode: sandbox.NetworkMode(n.Mode), AllowHosts: n.AllowHosts, AllowAddresses: n.AllowAddresses,
		Deny: n.Deny, Report: n.Report,
	}.Validate()
}

// EgressDecision is the policy's decision on a request of sandbox id to
// host (a name or an IP literal) and port through the egress proxy: the
// proxy's egress.Options.Policy. The policy sees it as action "egress" of
// the sandbox's owner. An egress request cannot wait for a person, so a
// verdict of ask denies it; a sandbox that is not live is denied.
func (s *Supervisor) EgressDecision(ctx context.Context, id, host string, port int) (allow bool, rule, reason string) {
	s.mu.Lock()
	l := s.live[id]
	var owner string
	if l != nil {
		owner = l.owner
	}
	s.mu.Unlock()
	if l == nil {
		return false, "unknown-sandbox", "the sandbox is not live"
	}
	r := l.request(policy.Request{Action: policy.ActionEgress, Host: host, Port: port, Key: owner})
	d, err := s.policy.Decide(ctx, r)
	if err != nil {
		s.log.Error("policy evaluation failed; denying egress", "sandbox_id", id, "err", err)
		return false, d.Rule, "the policy could not be evaluated"
	}
	switch d.Verdict {
	case policy.Allow:
		return true, d.Rule, d.Reason
	case policy.Ask:
		return false, d.Rule, d.Reason + " (an egress request cannot wait for a person's approval, so asking denies it)"
	}
	return false, d.Rule, d.Reason
}

// RecordEgress records one decision of the egress proxy in the audit log,
// with the sandbox's owner as the key: the proxy's egress.Options.Decided.
// It returns at once; the audit log's write happens meanwhile.
func (s *Supervisor) RecordEgress(d egress.Decision) {
	if s.opts.Audit == nil {
		return
	}
	s.mu.Lock()
	var owner string
	if l := s.live[d.SandboxID]; l != nil {
		owner = l.owner
	}
	s.mu.Unlock()
	ev := audit.Event{Kind: audit.KindEgress, Key: owner, Sandbox: d.SandboxID, Host: d.Host, Port: d.Port, IP: d.IP,
		Rule: d.Rule, Reason: d.Reason, Decision: d.Outcome, BytesSent: d.BytesSent, BytesReceived: d.BytesReceived}
	// The audit log fsyncs; the request does not wait for it.
	go s.recordAfter(context.Background(), ev)
}
