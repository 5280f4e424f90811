// Package egress is airlock's egress proxy: an HTTP forward proxy with
// CONNECT that lets a sandbox reach only what its policy allows.
//
// Each sandbox has its own Sandbox handle; every connection the sandbox
// makes reaches the proxy through that handle (ServeConn), so the proxy
// knows the caller by where the bytes came from, never by anything the
// sandbox says. Names are checked against the sandbox's allowlist, then
// resolved by the proxy; every resolved address is checked again right
// before it is connected to, and the check runs once more in the dialer's
// Control hook on the very address being connect()ed, so there is no DNS
// rebinding window. Private, loopback, link-local, CGNAT, ULA, multicast,
// documentation, benchmark, translation (NAT64, 6to4, Teredo, mapped) and
// metadata addresses are refused unless an allow-address entry names the
// exact IP:port.
package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Resolver resolves host names for the proxy. *net.Resolver implements it;
// tests map names to loopback addresses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc connects to an address the proxy has already checked ("IP:port").
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Limits bound what one sandbox may do through the proxy. A zero field
// means its default.
type Limits struct {
	// RequestsPerSecond is the sustained request rate (HTTP requests and
	// CONNECTs). 20.
	RequestsPerSecond float64
	// Burst is how many requests may come at once. 40.
	Burst int
	// MaxConns caps the sandbox's concurrent connections to the proxy. 32.
	MaxConns int
	// MaxBytes is the sandbox's byte budget, both directions together,
	// over its whole life. 1 GiB.
	MaxBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.RequestsPerSecond == 0 {
		l.RequestsPerSecond = 20
	}
	if l.Burst == 0 {
		l.Burst = 40
	}
	if l.MaxConns == 0 {
		l.MaxConns = 32
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = 1 << 30
	}
	return l
}

// SecretValue is a secret header value. It never appears in logs.
type SecretValue string

// LogValue keeps the secret out of logs.
func (SecretValue) LogValue() slog.Value { return slog.StringValue("REDACTED") }

// String keeps the secret out of formatted output.
func (SecretValue) String() string { return "REDACTED" }

// Secret is a value the proxy puts into requests for its hosts, which the
// sandbox never sees. A host with a secret is intercepted: its HTTPS is
// decrypted by the proxy (with Options.CA) so that the secret goes in
// there too; without a CA such a host is refused, never tunnelled.
type Secret struct {
	// Name, when set, gives the sandbox a placeholder for the secret:
	// AIRLOCK_SECRET_<Name> in its environment holds an opaque token that
	// the proxy replaces with Value wherever it appears in the headers of
	// a request to one of the secret's hosts. A request that carries it
	// to any other host is refused.
	Name string `toml:"name" json:"name,omitempty"`
	// Host and Hosts are the exact host names the secret is for.
	Host  string   `toml:"host" json:"host,omitempty"`
	Hosts []string `toml:"hosts" json:"hosts,omitempty"`
	// Header, when set, is set on every request to the hosts (replacing
	// what the sandbox sent) to Template with "{}" replaced by Value
	// ("Bearer {}"); an empty Template is the value alone.
	Header   string `toml:"header" json:"header,omitempty"`
	Template string `toml:"template" json:"template,omitempty"`
	// Value is the secret.
	Value SecretValue `toml:"value" json:"-"`
	// Scoped gives the secret only to sandboxes whose network names it
	// (sandbox.Network.Secrets: the daemon sets it for a secret a template
	// names). False: every sandbox of the proxy gets it.
	Scoped bool `toml:"-" json:"-"`
}

// label names the secret in logs and summaries.
func (s Secret) label() string {
	if s.Name != "" {
		return s.Name
	}
	return "header " + s.Header
}

// Options configure a Proxy. The zero value is ready to use.
type Options struct {
	// Logger receives one line per decision. Nil discards them.
	Logger *slog.Logger
	// Resolver resolves names. Nil means net.DefaultResolver.
	Resolver Resolver
	// Dial connects to checked addresses. Nil means a net.Dialer whose
	// Control hook checks the address again; tests replace it with a
	// recorder.
	Dial DialFunc
	// Limits apply to each sandbox.
	Limits Limits
	// Secrets are put into requests for their hosts.
	Secrets []Secret
	// Rules restrict the methods and paths of requests to their hosts.
	Rules []HostRule
	// CA signs the certificates of intercepted hosts (hosts with a secret
	// or a rule). Nil: such hosts are refused over CONNECT.
	CA *CA
	// UpstreamRoots verify intercepted hosts' certificates. Nil: the
	// system's roots.
	UpstreamRoots *x509.CertPool
	// DialTimeout bounds resolving and connecting. 10 s.
	DialTimeout time.Duration
	// Decided, when set, is told every logged decision (the daemon writes
	// them to its audit log). It must not block for long.
	Decided func(Decision)
	// Policy, when set, decides every request the sandbox's own rules let
	// through, before anything is resolved: the daemon's policy (its
	// [network] section and its rules on action "egress"). A refusal is a
	// 403 naming "policy " + rule, with reason as the body's reason.
	Policy func(ctx context.Context, sandboxID, host string, port int) (allow bool, rule, reason string)
	// PolicyRequest, when set, decides every request the proxy reads
	// (plain HTTP, and each request of an intercepted host) by its method
	// and path too, after the method and path rules let it through: the
	// daemon's policy rules on action "egress" with method set. A refusal
	// is a 403 naming "policy " + rule.
	PolicyRequest func(ctx context.Context, sandboxID, host string, port int, method, path string) (allow bool, rule, reason string)
}

// Proxy is the egress proxy shared by all sandboxes of one process.
type Proxy struct {
	opts    Options
	secrets []compiledSecret
	l7      []l7Rule
	// err is what is wrong with the options; every Attach fails with it.
	err error
	mu  sync.Mutex
	sbs map[string]*Sandbox
}

// New returns a proxy.
func New(opts Options) *Proxy {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	opts.Limits = opts.Limits.withDefaults()
	p := &Proxy{opts: opts, sbs: map[string]*Sandbox{}}
	p.secrets, p.err = compileSecrets(opts.Secrets)
	if p.err == nil {
		p.l7, p.err = compileL7(opts.Rules)
	}
	return p
}

// CheckOptions says what is wrong with the secrets and rules of opts.
func CheckOptions(opts Options) error {
	if _, err := compileSecrets(opts.Secrets); err != nil {
		return err
	}
	_, err := compileL7(opts.Rules)
	return err
}

// Attach registers sandbox id with its network policy and returns the
// handle its connections are served through. n must be in egress mode.
func (p *Proxy) Attach(id string, n sandbox.Network) (*Sandbox, error) {
	if n.Mode != sandbox.NetworkEgress {
		return nil, fmt.Errorf("attach %s to the egress proxy: network mode is %q: %w", id, n.Mode, sandbox.ErrInvalid)
	}
	if p.err != nil {
		return nil, fmt.Errorf("attach %s to the egress proxy: %w", id, p.err)
	}
	rules, err := p.compile(n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.sbs[id]; ok {
		return nil, fmt.Errorf("attach %s to the egress proxy: %w", id, sandbox.ErrExists)
	}
	lim := p.opts.Limits
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sandbox{
		p: p, id: id, ctx: ctx, cancel: cancel,
		limiter: rate.NewLimiter(rate.Limit(lim.RequestsPerSecond), lim.Burst),
		conns:   map[net.Conn]struct{}{},
		hosts:   map[string]*HostSummary{},

		placeholders: newPlaceholders(p.opts.CA, id, rules.secrets),
	}
	s.rules.Store(rules)
	s.dial = p.opts.Dial
	if s.dial == nil {
		d := &net.Dialer{Timeout: p.opts.DialTimeout, Control: s.control}
		s.dial = d.DialContext
	}
	s.transport = s.newTransport()
	p.sbs[id] = s
	return s, nil
}

// Sandbox returns the handle of sandbox id.
func (p *Proxy) Sandbox(id string) (*Sandbox, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sbs[id]
	return s, ok
}

// Sandbox is one sandbox's view of the proxy.
type Sandbox struct {
	p       *Proxy
	id      string
	rules   atomic.Pointer[Rules] // SetNetwork replaces them
	dial    DialFunc
	limiter *rate.Limiter
	ctx     context.Context // ends when the sandbox is detached
	cancel  context.CancelFunc

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	sum    Summary
	hosts  map[string]*HostSummary

	sent, recv atomic.Int64
	// reserved is the byte budget splice rounds hold (splice.go).
	reserved atomic.Int64

	limitLogged     time.Time // see sampleLimit
	limitSuppressed int64

	// placeholders are the sandbox's tokens for named secrets.
	placeholders map[string]string
	// transport carries intercepted requests upstream.
	transport *upstreams
}

// ID names the sandbox.
func (s *Sandbox) ID() string { return s.id }

// SetNetwork replaces the sandbox's rules with n's (network mode egress)
// and closes its open connections, which the rules before admitted: what
// it opens from now on the new rules decide.
func (s *Sandbox) SetNetwork(n sandbox.Network) error {
	if n.Mode != sandbox.NetworkEgress {
		return fmt.Errorf("network of %s: mode %q: %w", s.id, n.Mode, sandbox.ErrInvalid)
	}
	rules, err := s.p.compile(n)
	if err != nil {
		return err
	}
	s.rules.Store(rules)
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	return nil
}

// Close detaches the sandbox and ends its connections.
func (s *Sandbox) Close() {
	s.p.mu.Lock()
	if s.p.sbs[s.id] == s {
		delete(s.p.sbs, s.id)
	}
	s.p.mu.Unlock()
	s.cancel()
	s.transport.CloseIdleConnections()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

// track adds c to the live connections, unless the cap is reached.
func (s *Sandbox) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.conns) >= s.p.opts.Limits.MaxConns {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Sandbox) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// ServeConn serves one connection the sandbox opened to its proxy port,
// then closes it.
func (s *Sandbox) ServeConn(c net.Conn) {
	defer c.Close()
	cr := &connReader{r: c}
	br := bufio.NewReader(cr)
	if !s.track(c) {
		// Answer the first request so that the client learns why.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if req, err := http.ReadRequest(br); err == nil {
			d := s.newDecision(req)
			d.refuse(http.StatusTooManyRequests, "connection-cap", fmt.Sprintf("more than %d connections at once", s.p.opts.Limits.MaxConns))
			s.finish(d, c)
		}
		return
	}
	defer s.untrack(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			if cr.err == nil { // the bytes came, and do not parse
				_ = c.SetReadDeadline(time.Time{})
				d := &decision{malformed: true}
				d.refuse(http.StatusBadRequest, "bad-request", "the request does not parse as HTTP/1.1: send one request line with an absolute http:// URL (or CONNECT host:port) and one Host header")
				s.finish(d, c)
			}
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			s.connect(c, br, req)
			return
		}
		if !s.forward(c, req) {
			return
		}
	}
}

// connReader remembers the error of the connection it reads, so that a
// request that does not parse can be told from a connection that broke.
type connReader struct {
	r   io.Reader
	err error
}

func (c *connReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// Decision is one request's outcome, as Options.Decided is told it once
// the request has ended.
type Decision struct {
	SandboxID string
	// Method is the request's method (CONNECT for a tunnel); Host and Port
	// are what it asked for, IP where it was sent ("" if nowhere).
	Method string
	Host   string
	Port   int
	IP     string
	// Rule is the rule that decided; Reason says why it was refused.
	Rule   string
	Reason string
	// Outcome is "allow", "deny" or "would_deny" (report mode let it
	// through).
	Outcome string
	// Status is the HTTP status the sandbox got.
	Status int
	// BytesSent and BytesReceived count bytes to and from the destination.
	BytesSent, BytesReceived int64
	// Path is the request's path, without its query (plain HTTP and
	// intercepted HTTPS only); Intercepted says the request came over a
	// CONNECT the proxy decrypted; Secrets name the secrets put into it.
	Path        string
	Intercepted bool
	Secrets     []string
}

// decision is one request's outcome, logged once.
type decision struct {
	// malformed: the request did not parse; there is no method or host.
	malformed    bool
	method, host string
	port         int
	ip           string
	v            Verdict
	status       int
	reason       string
	sent, recv   int64
	// answered says the client got upstream's answer (or the tunnel).
	answered bool
	// path, intercepted, secrets: see Decision.
	path        string
	intercepted bool
	secrets     []string
}

func (s *Sandbox) newDecision(req *http.Request) *decision {
	d := &decision{method: req.Method}
	hostport := req.Host
	if req.Method != http.MethodConnect && req.URL != nil && req.URL.Host != "" {
		hostport = req.URL.Host
	}
	d.host, d.port = splitHostPort(hostport, req.Method == http.MethodConnect)
	return d
}

// splitHostPort splits a request's authority into a lower-case host
// without brackets and a port (80, or 443 for CONNECT, when absent; -1 when
// malformed).
func splitHostPort(hp string, connect bool) (string, int) {
	port := 80
	if connect {
		port = 443
	}
	host := hp
	if h, p, err := net.SplitHostPort(hp); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return strings.ToLower(h), -1
		}
		host, port = h, n
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

func (d *decision) refuse(status int, rule, reason string) {
	d.status, d.v = status, Verdict{Rule: rule}
	d.reason = reason
}

// admit runs the checks that come before any network I/O: the byte
// budget, the rate limit and the name rules. It reports whether to go on.
func (s *Sandbox) admit(d *decision) bool {
	switch {
	case d.host == "" || d.port < 0:
		d.refuse(http.StatusBadRequest, "bad-request", "the request names no valid host and port")
		return false
	case s.bytesUsed() >= s.p.opts.Limits.MaxBytes:
		d.refuse(http.StatusForbidden, "byte-budget", fmt.Sprintf("the sandbox's egress budget of %d bytes is spent", s.p.opts.Limits.MaxBytes))
		return false
	case !s.limiter.Allow():
		d.refuse(http.StatusTooManyRequests, "rate-limit", fmt.Sprintf("more than %g requests per second", s.p.opts.Limits.RequestsPerSecond))
		return false
	}
	d.v = s.rules.Load().checkName(d.host, d.port)
	if !d.v.Allow {
		d.status = http.StatusForbidden
		return false
	}
	if f := s.p.opts.Policy; f != nil {
		if ok, rule, reason := f(s.ctx, s.id, d.host, d.port); !ok {
			d.v = Verdict{Rule: "policy " + rule}
			d.status, d.reason = http.StatusForbidden, reason
			return false
		}
	}
	return true
}

// deniedError is a connection the rules refused at dial time.
type deniedError struct{ v Verdict }

func (e *deniedError) Error() string { return "egress denied: " + e.v.Rule }

// control is the default dialer's last check, on the address being
// connected to.
func (s *Sandbox) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &deniedError{Verdict{Rule: "blocked unparsable address"}}
	}
	if v := s.rules.Load().checkAddr(ap); !v.Allow {
		return &deniedError{v}
	}
	return nil
}

// connectUpstream resolves d's host and connects to the first address the
// rules allow. It sets d's verdict, IP and (on failure) status.
func (s *Sandbox) connectUpstream(d *decision) (net.Conn, bool) {
	ctx, cancel := context.WithTimeout(s.ctx, s.p.opts.DialTimeout)
	defer cancel()
	var ips []netip.Addr
	if ip, ok := ParseIP(d.host); ok {
		ips = []netip.Addr{ip}
	} else {
		var err error
		ips, err = s.p.opts.Resolver.LookupNetIP(ctx, "ip", d.host)
		if err != nil || len(ips) == 0 {
			d.status, d.reason = http.StatusBadGateway, "the host name does not resolve"
			return nil, false
		}
	}
	nameVerdict := d.v
	var denied *Verdict
	for _, ip := range ips {
		// A resolver answers ::ffff:a.b.c.d for names in /etc/hosts: the
		// address is a.b.c.d, for allow-address and for the blocks alike
		// (the embedded address is checked either way).
		ap := netip.AddrPortFrom(ip.Unmap(), uint16(d.port))
		v := s.rules.Load().checkAddr(ap)
		d.ip = ap.Addr().String()
		if !v.Allow {
			denied = &v
			continue
		}
		c, err := s.dial(ctx, "tcp", ap.String())
		if err != nil {
			var de *deniedError
			if errors.As(err, &de) {
				denied = &de.v
				continue
			}
			d.status, d.reason = http.StatusBadGateway, "the destination cannot be reached"
			s.p.opts.Logger.Debug("egress dial failed", "sandbox_id", s.id, "ip", d.ip, "err", err)
			continue
		}
		d.status, d.reason = 0, "" // an earlier address may have failed
		switch {
		case nameVerdict.WouldDeny && v.WouldDeny:
			d.v = Verdict{Allow: true, WouldDeny: true, Rule: nameVerdict.Rule + "; " + v.Rule}
		case nameVerdict.WouldDeny:
			d.v = nameVerdict
		case v.WouldDeny:
			d.v = v
		}
		return c, true
	}
	if denied != nil {
		d.v, d.status, d.reason = *denied, http.StatusForbidden, ""
	}
	return nil, false
}

// connect serves a CONNECT: a 200 and a byte tunnel, or a refusal.
func (s *Sandbox) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	d := s.newDecision(req)
	admitted := s.admit(d)
	if admitted && s.rules.Load().intercepts(d.host) {
		// Never tunnelled: its requests are seen, or it is refused.
		s.intercept(c, br, d)
		return
	}
	defer s.finish(d, c)
	if !admitted {
		return
	}
	up, ok := s.connectUpstream(d)
	if !ok {
		return
	}
	defer up.Close()
	cu := s.counted(up, d)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	d.status, d.answered = http.StatusOK, true
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.toUpstream(cu, c, br) // what the client sent after CONNECT is in br first
		closeWrite(up)
	}()
	s.fromUpstream(c, cu)
	closeWrite(c)
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-s.ctx.Done():
	}
	// A client that never closes its side must not keep the tunnel alive
	// once upstream has finished.
	up.Close()
	c.Close()
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// hopHeaders are per-connection headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

// forward serves one plain-HTTP request. It reports whether the client
// connection may carry another.
func (s *Sandbox) forward(c net.Conn, req *http.Request) bool {
	d := s.newDecision(req)
	defer s.finish(d, c)
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		d.refuse(http.StatusBadRequest, "bad-request", "send absolute http:// URLs, or CONNECT for https")
		return false
	}
	if !s.admit(d) {
		return !req.Close && drain(req)
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	if !s.vet(d, req.Method, req.URL, req.Header) {
		return !req.Close && drain(req)
	}
	secrets := s.secretsFor(d.host)
	up, ok := s.connectUpstream(d)
	if !ok {
		return !req.Close && drain(req)
	}
	defer up.Close()
	cu := s.counted(up, d)
	clientClose := req.Close || !req.ProtoAtLeast(1, 1)
	req.Host = req.URL.Host
	req.Close = true // one upstream connection per request
	if err := req.Write(cu); err != nil {
		d.status, d.reason = http.StatusBadGateway, "the destination closed the connection"
		return false
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(cu)
	defer func() { br.Reset(nil); readers.Put(br) }()
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		d.status, d.reason = http.StatusBadGateway, "the destination sent no valid response"
		return false
	}
	defer resp.Body.Close()
	d.status, d.answered = resp.StatusCode, true
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	maskSecrets(resp.Header, secrets)
	redactBody(resp, secrets)
	// Whether the client's connection stays open is the client's business
	// (and Write's, for bodies of unknown length), not upstream's.
	resp.Close = clientClose
	// Status line and headers go out in one write (the connection may be a
	// tunnel where each write is a message); the body in large ones.
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(bigCopier{c})
	defer func() { bw.Reset(nil); writers.Put(bw) }()
	if len(secrets) == 0 {
		// Nothing in the body to redact: the kernel may move it.
		if handled, ok := s.spliceBody(c, bw, cu, br, req, resp); handled {
			return ok
		}
	}
	if err := resp.Write(bw); err != nil {
		return false
	}
	if err := bw.Flush(); err != nil {
		return false
	}
	return !resp.Close
}

// secretMethods are the methods a request may have to get an injected
// secret: those whose answers do not reflect the request by definition.
// TRACE (which echoes the request, headers included), OPTIONS and methods
// of unknown meaning are refused to hosts with a secret instead.
var secretMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true,
}

// secretsFor returns the secrets that may be put into requests to host.
func (s *Sandbox) secretsFor(host string) []compiledSecret {
	var out []compiledSecret
	for _, sec := range s.rules.Load().secrets {
		if sec.forHost(host) {
			out = append(out, sec)
		}
	}
	return out
}

// maskSecrets replaces the secrets' values wherever they appear in the
// headers of an answer. (Bodies are passed on as they are: a server that
// echoes its request in a body can still hand the secret back; the README
// says so.)
func maskSecrets(h http.Header, secrets []compiledSecret) {
	for _, sec := range secrets {
		v := string(sec.Value)
		if v == "" {
			continue
		}
		for name, vals := range h {
			for i, x := range vals {
				if strings.Contains(x, v) {
					h[name][i] = strings.ReplaceAll(x, v, "[REDACTED]")
				}
			}
		}
	}
}

// copyBuffer is the size of the buffers bodies are copied with: fewer,
// larger system calls than io.Copy's 32 KiB.
const copyBuffer = 256 << 10

// bigCopier makes io.Copy into a connection use a copyBuffer-sized buffer.
type bigCopier struct{ net.Conn }

func (w bigCopier) ReadFrom(r io.Reader) (int64, error) {
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{w.Conn}, r, *buf)
}

var (
	buffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, copyBuffer) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, copyBuffer) }}
)

// drain reads what is left of a refused request's body, so that the
// connection can carry the next request; large bodies close it instead.
func drain(req *http.Request) bool {
	_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, 64<<10))
	var one [1]byte
	k, _ := req.Body.Read(one[:])
	return k == 0
}

// finish answers a refusal, logs the decision and adds it to the summary.
func (s *Sandbox) finish(d *decision, c net.Conn) {
	s.conclude(d)
	// A refusal is logged and counted before the client hears of it.
	if !d.answered {
		writeRefusal(c, d)
	}
}

// conclude logs the decision and adds it to the summary.
func (s *Sandbox) conclude(d *decision) {
	if d.status == 0 {
		d.status = http.StatusBadGateway
		d.reason = "the destination cannot be reached"
	}
	if d.answered && s.bytesUsed() >= s.p.opts.Limits.MaxBytes {
		d.reason = "egress byte budget spent"
	}
	outcome := "allow"
	switch {
	case d.v.WouldDeny:
		outcome = "would_deny"
	case !d.v.Allow:
		outcome = "deny"
	}
	if suppressed, ok := s.sampleLimit(d.v.Rule); ok {
		s.p.opts.Logger.Info("egress",
			"sandbox_id", s.id, "method", d.method, "host", d.host, "port", d.port, "ip", d.ip,
			"rule", d.v.Rule, "decision", outcome, "status", d.status,
			"bytes_sent", d.sent, "bytes_received", d.recv, "reason", d.reason,
			"path", d.path, "intercepted", d.intercepted, "secrets", d.secrets,
			"suppressed", suppressed)
		if f := s.p.opts.Decided; f != nil {
			f(Decision{SandboxID: s.id, Method: d.method, Host: d.host, Port: d.port, IP: d.ip, Rule: d.v.Rule, Reason: d.reason,
				Outcome: outcome, Status: d.status, BytesSent: d.sent, BytesReceived: d.recv,
				Path: d.path, Intercepted: d.intercepted, Secrets: d.secrets})
		}
	}
	s.record(d, outcome)
}

// sampleLimit keeps a sandbox that storms the proxy from flooding the log:
// refusals by a limit (rate, connections) are logged at most once a
// second, with the number left out since. Every other decision is logged.
func (s *Sandbox) sampleLimit(rule string) (suppressed int64, log bool) {
	if rule != "rate-limit" && rule != "connection-cap" {
		return 0, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.limitLogged) >= time.Second {
		s.limitLogged = now
		n := s.limitSuppressed
		s.limitSuppressed = 0
		return n, true
	}
	s.limitSuppressed++
	return 0, false
}

// writeRefusal answers the client with a short body that names the rule.
// It never carries internal error text.
func writeRefusal(c net.Conn, d *decision) {
	if d.malformed {
		body := "airlock egress: malformed request: " + d.reason + "\n"
		_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nX-Airlock-Egress-Rule: %s\r\n\r\n%s",
			d.status, http.StatusText(d.status), len(body), strconv.Quote(d.v.Rule), body)
		return
	}
	body := refusalBody(d)
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Airlock-Egress-Rule: %s\r\n\r\n%s",
		d.status, http.StatusText(d.status), len(body), strconv.Quote(d.v.Rule), body)
}

// refusalBody is the body of a refusal: what was refused, by which rule,
// and why, for a person or a model to read.
func refusalBody(d *decision) string {
	what := fmt.Sprintf("%s:%d", d.host, d.port)
	if d.path != "" {
		what += d.path
	}
	body := fmt.Sprintf("airlock egress: %s %s refused", d.method, what)
	if d.v.Rule != "" {
		body += " by rule " + strconv.Quote(d.v.Rule)
	}
	if d.reason != "" {
		body += ": " + d.reason
	}
	return body + "\n"
}
