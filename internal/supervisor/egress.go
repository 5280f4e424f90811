package supervisor

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
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
//	secrets = ["GITHUB"]                   # [[egress.secret]] names: only this template's sandboxes get them
//
//	[[template.network.rule]]              # method and path rules for this template's sandboxes
//	host = "api.github.com"
//	allow = ["GET /repos/**"]
type TemplateNetwork struct {
	Mode           string   `toml:"mode"`
	AllowHosts     []string `toml:"allow_hosts"`
	AllowAddresses []string `toml:"allow_addresses"`
	Deny           []string `toml:"deny"`
	Report         bool     `toml:"report"`
	// Secrets names daemon secrets ([[egress.secret]] name) the template's
	// sandboxes may use. A secret some template names goes to those
	// templates' sandboxes only; one no template names, to every egress
	// sandbox (as before templates could name them).
	Secrets []string `toml:"secrets"`
	// Rules are method and path rules for the template's sandboxes, beside
	// the daemon's [[egress.rule]]s.
	Rules []egress.HostRule `toml:"rule"`
}

// EgressConfig configures the daemon's egress proxy.
//
//	[egress]
//	requests_per_second = 20   # per sandbox
//	burst = 40
//	max_conns = 32             # concurrent connections per sandbox
//	max_bytes = "1G"           # per sandbox, both directions
//	upstream_ca_bundle = ""    # PEM file verifying intercepted hosts (default: the system's roots)
//
//	[[egress.secret]]          # GET, HEAD, POST, PUT, PATCH and DELETE only
//	name = "GITHUB"            # sandboxes get AIRLOCK_SECRET_GITHUB, a placeholder
//	hosts = ["api.github.com"]
//	header = "Authorization"   # optional: set on every request to the hosts
//	template = "Bearer {}"
//	value_env = "GITHUB_TOKEN" # or value = "..."
//
//	[[egress.rule]]            # method and path rules for a host
//	host = "api.github.com"
//	allow = ["GET /repos/**"]
//	deny = ["* /admin/**"]
//
// A host with a secret or a rule is intercepted: the proxy decrypts its
// HTTPS with a CA of the daemon's (STATE/egress-ca.key).
type EgressConfig struct {
	// scoped are the secrets some template names (set by withDefaults);
	// templateRules says whether some template has rules.
	scoped        map[string]bool
	templateRules bool

	RequestsPerSecond float64           `toml:"requests_per_second"`
	Burst             int               `toml:"burst"`
	MaxConns          int               `toml:"max_conns"`
	MaxBytes          Size              `toml:"max_bytes"`
	UpstreamCABundle  string            `toml:"upstream_ca_bundle"`
	Secrets           []EgressSecret    `toml:"secret"`
	Rules             []egress.HostRule `toml:"rule"`
}

// EgressSecret is a secret for some hosts (see egress.Secret).
type EgressSecret struct {
	Name     string             `toml:"name"`
	Host     string             `toml:"host"`
	Hosts    []string           `toml:"hosts"`
	Header   string             `toml:"header"`
	Template string             `toml:"template"`
	Value    egress.SecretValue `toml:"value"`
	// ValueEnv names the daemon's environment variable the value is in.
	ValueEnv string `toml:"value_env"`
}

// ProxyOptions returns the egress proxy's options for this configuration.
// Interception (the CA, the upstream roots) is Intercept's.
func (c EgressConfig) ProxyOptions(log *slog.Logger) egress.Options {
	o := egress.Options{Logger: log, Limits: egress.Limits{
		RequestsPerSecond: c.RequestsPerSecond, Burst: c.Burst, MaxConns: c.MaxConns, MaxBytes: int64(c.MaxBytes),
	}, Rules: c.Rules}
	for _, s := range c.Secrets {
		v := s.Value
		if s.ValueEnv != "" {
			v = egress.SecretValue(os.Getenv(s.ValueEnv))
		}
		o.Secrets = append(o.Secrets, egress.Secret{Name: s.Name, Host: s.Host, Hosts: s.Hosts, Header: s.Header, Template: s.Template, Value: v,
			Scoped: s.Name != "" && c.scoped[s.Name]})
	}
	return o
}

// Intercept sets up o's interception when the configuration has secrets
// or rules: the CA in stateDir (made the first time) and the roots that
// verify upstreams.
func (c EgressConfig) Intercept(o *egress.Options, stateDir string) error {
	if len(c.Secrets) == 0 && len(c.Rules) == 0 && !c.templateRules {
		return nil
	}
	ca, err := egress.LoadCA(stateDir)
	if err != nil {
		return err
	}
	o.CA = ca
	if c.UpstreamCABundle != "" {
		b, err := os.ReadFile(c.UpstreamCABundle)
		if err != nil {
			return keyErr("egress.upstream_ca_bundle", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return keyErr("egress.upstream_ca_bundle", fmt.Errorf("%s holds no PEM certificate", c.UpstreamCABundle))
		}
		o.UpstreamRoots = pool
	}
	return nil
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
		hosts := s.Hosts
		if s.Host != "" {
			hosts = append([]string{s.Host}, hosts...)
		}
		if len(hosts) == 0 {
			return keyErr(key("hosts"), fmt.Errorf("egress secret %q: give its hosts", s.Name))
		}
		for j, h := range hosts {
			if _, _, err := sandbox.ParseHostPattern(h); err != nil || strings.ContainsAny(h, "*:") {
				k := key("hosts")
				if j == 0 && s.Host != "" {
					k = key("host")
				}
				return keyErr(k, fmt.Errorf("egress secret for %q: give host names, without wildcard or port", h))
			}
		}
		if (s.Header == "" && s.Name == "") || strings.ContainsAny(s.Header, " :\r\n") {
			return keyErr(key("header"), fmt.Errorf("egress secret for %q: give a header name, or a name (for a placeholder), or both", hosts[0]))
		}
		if s.Name != "" && !egress.ValidSecretName(s.Name) {
			return keyErr(key("name"), fmt.Errorf("egress secret %q: a name is upper-case letters, digits and _, starting with a letter", s.Name))
		}
		if strings.ContainsAny(string(s.Value)+s.Template, "\r\n") {
			return keyErr(key("value"), fmt.Errorf("egress secret for %q: give a one-line value", hosts[0]))
		}
		if s.ValueEnv != "" && (s.Value != "" || os.Getenv(s.ValueEnv) == "") {
			return keyErr(key("value_env"), fmt.Errorf("egress secret for %q: give value or value_env (a variable set in the daemon's environment), not both", hosts[0]))
		}
	}
	opts := c.ProxyOptions(nil)
	if err := egress.CheckOptions(opts); err != nil {
		return keyErr("egress", err)
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
		Deny: slices.Clone(n.Deny), Secrets: slices.Clone(n.Secrets), Rules: slices.Clone(n.Rules),
	}
}

// zeroNetwork reports whether a create leaves the network to the template.
func zeroNetwork(n sandbox.Network) bool {
	return n.Mode == "" && len(n.AllowHosts) == 0 && len(n.AllowAddresses) == 0 && len(n.Deny) == 0 && !n.Report &&
		len(n.Secrets) == 0 && len(n.Rules) == 0
}

// network returns the network a create gets: the template's when it asks
// for none, else what it asks for if the template allows all of it. A
// request asking for more is refused, not trimmed. The template's deny
// rules and method and path rules always apply (a create's own rules are
// added: they only narrow), and its secrets unless the create names fewer
// of them.
func (t Template) network(req sandbox.Network) (sandbox.Network, error) {
	n := t.Network.defaultNetwork()
	if zeroNetwork(req) {
		return n, nil
	}
	if req.Mode == "" && (len(req.AllowHosts) > 0 || len(req.AllowAddresses) > 0 || req.Report || len(req.Secrets) > 0 || len(req.Rules) > 0) {
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
	for _, name := range req.Secrets {
		if !slices.Contains(t.Network.Secrets, name) {
			return refuse(fmt.Sprintf("secret %q", name))
		}
	}
	if req.Secrets == nil {
		req.Secrets = slices.Clone(t.Network.Secrets)
	}
	if err := egress.CheckOptions(egress.Options{Rules: req.Rules}); err != nil {
		return req, fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	}
	req.Rules = append(slices.Clone(t.Network.Rules), req.Rules...)
	req.Deny = append(slices.Clone(req.Deny), t.Network.Deny...)
	return req, nil
}

// Egress says what sandbox id did through the egress proxy, and what
// reached its exposed ports (Summary.Exposed). A sandbox without egress
// whose ports were asked for has a summary of mode "none" with those
// alone; one without either has none (not found).
func (s *Supervisor) Egress(_ context.Context, c Caller, id string) (egress.Summary, error) {
	l, err := s.lookupAsIs(c, id)
	if err != nil {
		return egress.Summary{}, err
	}
	l.mu.Lock()
	inst := l.inst
	l.mu.Unlock()
	exposed := l.exposed.summary()
	if r, ok := inst.(egress.Reporter); ok {
		if sum, ok := r.EgressSummary(); ok {
			sum.Exposed = exposed
			return sum, nil
		}
	}
	if exposed != nil {
		return egress.Summary{SandboxID: id, Mode: string(sandbox.NetworkNone), Hosts: []egress.HostSummary{}, Exposed: exposed}, nil
	}
	return egress.Summary{}, fmt.Errorf("sandbox %s has no egress (network mode none): %w", id, sandbox.ErrNotFound)
}

// check validates the template's network as written; named are the
// daemon's named secrets. Rules in mode none are checked but do nothing
// (there is no traffic to apply them to).
func (n TemplateNetwork) check(named map[string]bool) error {
	nw := sandbox.Network{
		Mode: sandbox.NetworkMode(n.Mode), AllowHosts: n.AllowHosts, AllowAddresses: n.AllowAddresses,
		Deny: n.Deny, Report: n.Report, Secrets: n.Secrets,
	}
	if nw.Mode == sandbox.NetworkEgress {
		nw.Rules = n.Rules
	}
	if err := nw.Validate(); err != nil {
		return err
	}
	for _, s := range n.Secrets {
		if !named[s] {
			return fmt.Errorf("secret %q: no [[egress.secret]] has that name", s)
		}
	}
	return egress.CheckOptions(egress.Options{Rules: n.Rules})
}

// EgressDecision is the policy's decision on a request of sandbox id to
// host (a name or an IP literal) and port through the egress proxy: the
// proxy's egress.Options.Policy. The policy sees it as action "egress" of
// the sandbox's owner. An egress request cannot wait for a person, so a
// verdict of ask denies it; a sandbox that is not live is denied.
func (s *Supervisor) EgressDecision(ctx context.Context, id, host string, port int) (allow bool, rule, reason string) {
	return s.egressDecision(ctx, id, policy.Request{Host: host, Port: port})
}

// EgressRequestDecision is the policy's decision on one HTTP request the
// proxy reads (plain HTTP, or an intercepted host's): EgressDecision with
// the request's method and path, so that rules can say
// `method == "DELETE"`: the proxy's egress.Options.PolicyRequest.
func (s *Supervisor) EgressRequestDecision(ctx context.Context, id, host string, port int, method, path string) (allow bool, rule, reason string) {
	return s.egressDecision(ctx, id, policy.Request{Host: host, Port: port, Method: method, Path: path})
}

func (s *Supervisor) egressDecision(ctx context.Context, id string, req policy.Request) (allow bool, rule, reason string) {
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
	req.Action, req.Key = policy.ActionEgress, owner
	r := l.request(req)
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
		Rule: d.Rule, Reason: d.Reason, Decision: d.Outcome, BytesSent: d.BytesSent, BytesReceived: d.BytesReceived,
		Method: d.Method, Path: d.Path, Secrets: d.Secrets}
	// The audit log fsyncs; the request does not wait for it.
	go s.recordAfter(context.Background(), ev)
}
