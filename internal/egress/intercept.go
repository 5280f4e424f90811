package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Interception.
//
// A CONNECT to a host with a secret or a method and path rule is answered
// with a 200 like any other, and then the proxy is the TLS server: it
// shows a certificate for the CONNECT's host signed by the daemon's CA
// (which only the sandbox's own trust store holds), negotiates HTTP/2 or
// HTTP/1.1, and serves each request as the plain-HTTP path does (the
// rules, the placeholders, the secrets, the log) before sending it to the
// CONNECT's host (whatever Host the request names) over a TLS connection
// of its own, verified against the system's roots or Options.UpstreamRoots.
// Nothing falls back to a tunnel: a client that refuses the certificate
// fails, and so does an upstream the proxy cannot verify.

// SandboxCABundle is where the sandbox finds the bundle it trusts: its own
// system bundle and the daemon's CA (the agent writes it; see
// agent.EgressConfig.CA). CAEnv are the variables that point tools at it.
const SandboxCABundle = "/tmp/.airlock-ca-bundle.pem"

// CAEnv names the variables set to SandboxCABundle.
var CAEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}

// Env is what the sandbox's commands get in their environment besides the
// proxy's address: where the CA bundle is, when the proxy intercepts, and
// AIRLOCK_SECRET_<NAME>, a placeholder, for each named secret.
func (s *Sandbox) Env() []string {
	var env []string
	if s.p.opts.CA != nil {
		for _, k := range CAEnv {
			env = append(env, k+"="+SandboxCABundle)
		}
	}
	for name, tok := range s.placeholders {
		env = append(env, SecretEnvPrefix+name+"="+tok)
	}
	slices.Sort(env)
	return env
}

// CAPEM is the certificate of the CA the sandbox must trust, or nil when
// the proxy does not intercept.
func (s *Sandbox) CAPEM() []byte {
	if s.p.opts.CA == nil {
		return nil
	}
	return s.p.opts.CA.CertPEM()
}

// intercept serves a CONNECT to a host the proxy decrypts. d is admitted.
func (s *Sandbox) intercept(c net.Conn, br *bufio.Reader, d *decision) {
	d.intercepted = true
	ca := s.p.opts.CA
	if ca == nil {
		d.refuse(http.StatusForbidden, "intercept-unavailable", "the host has a secret or method and path rules, which need the daemon's egress CA to be seen over HTTPS; the daemon has none, and the host is never tunnelled unseen")
		s.finish(d, c)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	cc := newInterceptedConn(c, br)
	done := cc.done
	bt := &recordBatcher{Conn: cc}
	tc := tls.Server(bt, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.leaf(d.host)
		},
	})
	hctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		// The client would not take the CA's certificate (it pins, or has
		// a trust store of its own), or went away: it fails, closed.
		d.v = Verdict{Rule: "intercept-handshake"}
		d.status, d.reason = http.StatusBadGateway, "the client did not complete TLS with the proxy (a client that pins certificates or does not trust the sandbox's CA bundle cannot reach an intercepted host)"
		s.conclude(d)
		tc.Close()
		return
	}
	srv := &http.Server{
		Handler:           s.interceptHandler(d.host, d.port, bt),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	ln := &oneConnListener{c: tc, closed: make(chan struct{})}
	go func() { _ = srv.Serve(ln) }()
	select {
	case <-done:
	case <-s.ctx.Done():
	}
	srv.Close()
	tc.Close()
}

// decisionKey carries an intercepted request's decision to the dialer
// and the reverse proxy's hooks.
type decisionKey struct{}

// reqState is an intercepted request's decision and its bodies' byte
// counts, which an upgraded connection's copiers may still add to after
// the handler has returned.
type reqState struct {
	d          *decision
	sent, recv atomic.Int64
}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(decisionKey{}).(*reqState)
	if st == nil {
		st = &reqState{d: &decision{}}
	}
	return st
}

// interceptHandler serves the requests of one intercepted connection to
// host:port, whose TLS session writes through bt.
func (s *Sandbox) interceptHandler(host string, port int, bt *recordBatcher) http.Handler {
	authority := host
	if ip, ok := ParseIP(host); ok && ip.Is6() {
		authority = "[" + host + "]"
	}
	if port != 443 {
		authority = net.JoinHostPort(host, strconv.Itoa(port))
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", authority, authority
		},
		Transport:  s.transport,
		ErrorLog:   log.New(io.Discard, "", 0),
		BufferPool: copyBuffers{},
		ModifyResponse: func(resp *http.Response) error {
			st := stateOf(resp.Request.Context())
			st.d.status, st.d.answered = resp.StatusCode, true
			secrets := s.secretsFor(host)
			maskSecrets(resp.Header, secrets)
			if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
				// An upgrade (101): the reverse proxy writes to it too.
				resp.Body = &countingRWBody{countingBody{ReadCloser: rw, n: &st.recv}, rw}
			} else {
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &st.recv}
				redactBody(resp, secrets)
				if resp.Request.ProtoMajor == 1 && (resp.ContentLength < 0 || resp.ContentLength >= readAheadMin) {
					// Read ahead for the batched writes (batch.go).
					resp.Body = newReadAhead(resp.Body)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := stateOf(r.Context())
			d := st.d
			if d.answered {
				return // the body broke off: the status is out already
			}
			d.sent = st.sent.Load()
			var de *upstreamError
			var ve *tls.CertificateVerificationError
			switch {
			case errors.As(err, &de):
				d.v, d.status, d.reason, d.ip = de.d.v, de.d.status, de.d.reason, de.d.ip
			case errors.As(err, &ve):
				d.status, d.reason = http.StatusBadGateway, "the destination's certificate is not trusted (the proxy verifies it against the system's roots or the configured bundle)"
			default:
				d.status, d.reason = http.StatusBadGateway, "the destination did not answer over HTTPS"
			}
			s.conclude(d)
			writeHTTPRefusal(w, d)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := &decision{method: r.Method, host: host, port: port, intercepted: true, path: r.URL.Path}
		if !s.admit(d) || !s.vet(d, r.Method, r.URL, r.Header) {
			if r.Body != nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 64<<10))
			}
			s.conclude(d)
			writeHTTPRefusal(w, d)
			return
		}
		st := &reqState{d: d}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &countingBody{ReadCloser: r.Body, n: &st.sent}
		}
		ctx := context.WithValue(r.Context(), decisionKey{}, st)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if a, ok := ci.Conn.RemoteAddr().(*net.TCPAddr); ok {
				d.ip = a.IP.String()
			}
		}})
		if r.ProtoMajor == 1 {
			w = &batchedWriter{ResponseWriter: w, b: bt}
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
		if d.answered {
			// An upgraded connection's bytes so far: it may outlive this.
			d.sent, d.recv = st.sent.Load(), st.recv.Load()
			s.conclude(d)
		}
	})
}

// writeHTTPRefusal answers a refused intercepted request.
func writeHTTPRefusal(w http.ResponseWriter, d *decision) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Airlock-Egress-Rule", strconv.Quote(d.v.Rule))
	w.WriteHeader(d.status)
	_, _ = io.WriteString(w, refusalBody(d))
}

// upstreamError is a dial the rules refused or that failed; d says how.
type upstreamError struct{ d *decision }

func (e *upstreamError) Error() string { return "egress: " + e.d.reason }

// upstreams are the transports intercepted requests go upstream on, one
// per protocol: a request goes on in the HTTP version the sandbox's client
// chose with the proxy. An HTTP/1.1 client's request is sent over HTTP/1.1
// (ALPN offers only http/1.1), an HTTP/2 client's over HTTP/2 when the
// server offers it. Beside keeping the server's view of the client, this
// spares an HTTP/1.1 download HTTP/2's framing and flow control at both
// ends of the upstream connection, which cost more CPU than the second
// TLS session did (docs/decisions.md, 72).
type upstreams struct{ h1, h2 *http.Transport }

func (u *upstreams) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 {
		return u.h2.RoundTrip(r)
	}
	return u.h1.RoundTrip(r)
}

func (u *upstreams) CloseIdleConnections() {
	u.h1.CloseIdleConnections()
	u.h2.CloseIdleConnections()
}

// newTransport makes the transports intercepted requests go upstream on.
func (s *Sandbox) newTransport() *upstreams {
	h2 := s.newHTTPTransport()
	h1 := s.newHTTPTransport()
	h1.ForceAttemptHTTP2 = false
	h1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // never HTTP/2
	return &upstreams{h1: h1, h2: h2}
}

// newHTTPTransport makes a transport for intercepted requests: every
// connection through the guarded dialer, counted against the sandbox's
// budget, TLS verified, never through another proxy.
func (s *Sandbox) newHTTPTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, ps, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(ps)
			if err != nil {
				return nil, err
			}
			dd := &decision{host: host, port: port, v: s.rules.Load().checkName(host, port)}
			if !dd.v.Allow {
				dd.status = http.StatusForbidden
				return nil, &upstreamError{dd}
			}
			up, ok := s.connectUpstream(dd)
			if !ok {
				if dd.status == 0 {
					dd.status, dd.reason = http.StatusBadGateway, "the destination cannot be reached"
				}
				return nil, &upstreamError{dd}
			}
			return s.counted(up, dd), nil
		},
		TLSClientConfig:     &tls.Config{RootCAs: s.p.opts.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 8,
		// As many upstream connections as the sandbox may have to the
		// proxy: HTTP/2 streams from the sandbox do not multiply them,
		// and an HTTP/1.1 connection of the sandbox's asks one request at
		// a time, so the two transports together stay near the cap too.
		MaxConnsPerHost:    s.p.opts.Limits.MaxConns,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true, // what the client asked for, as it asked
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
	}
}

// copyBuffers lends the reverse proxy the proxy's large copy buffers.
type copyBuffers struct{}

func (copyBuffers) Get() []byte { return *buffers.Get().(*[]byte) }

func (copyBuffers) Put(b []byte) {
	if cap(b) == copyBuffer {
		b = b[:copyBuffer]
		buffers.Put(&b)
	}
}

// countingBody counts the bytes read through it.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// countingRWBody is an upgraded connection's body: counted reads, and
// writes.
type countingRWBody struct {
	countingBody
	w io.Writer
}

func (b *countingRWBody) Write(p []byte) (int, error) { return b.w.Write(p) }

// interceptedConn is the client's connection after CONNECT: what the
// proxy already buffered comes first, and closing it says the
// interception is over. Its reads honour read deadlines whatever the
// connection underneath does (the agent's tunnel ignores them): the HTTP
// server sets one to stop its background read after each request, and
// would otherwise wait for the client's next bytes before it answers
// "Connection: close" with the end of the connection.
type interceptedConn struct {
	net.Conn
	done chan struct{}
	once sync.Once

	data    chan []byte // from pump; closed after the first error
	rerr    error       // pump's error, set before data is closed
	pending []byte      // what the last read left of a chunk

	mu       sync.Mutex
	deadline time.Time
	wake     chan struct{} // closed when the deadline changes
}

func newInterceptedConn(c net.Conn, r *bufio.Reader) *interceptedConn {
	ic := &interceptedConn{Conn: c, done: make(chan struct{}), data: make(chan []byte), wake: make(chan struct{})}
	go ic.pump(r)
	return ic
}

func (c *interceptedConn) pump(r io.Reader) {
	for {
		buf := make([]byte, 32<<10)
		n, err := r.Read(buf)
		if n > 0 {
			select {
			case c.data <- buf[:n]:
			case <-c.done:
				return
			}
		}
		if err != nil {
			c.rerr = err
			close(c.data)
			return
		}
	}
}

func (c *interceptedConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	for {
		c.mu.Lock()
		dl, wake := c.deadline, c.wake
		c.mu.Unlock()
		var timeout <-chan time.Time
		stop := func() bool { return false }
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			timeout, stop = t.C, t.Stop
		}
		select {
		case b, ok := <-c.data:
			stop()
			if !ok {
				return 0, c.rerr
			}
			n := copy(p, b)
			c.pending = b[n:]
			return n, nil
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		case <-wake:
			stop()
		case <-c.done:
			stop()
			return 0, net.ErrClosed
		}
	}
}

func (c *interceptedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

func (c *interceptedConn) SetDeadline(t time.Time) error {
	_ = c.Conn.SetWriteDeadline(t)
	return c.SetReadDeadline(t)
}

func (c *interceptedConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// oneConnListener hands an http.Server one connection, then waits until
// it is closed.
type oneConnListener struct {
	c      net.Conn
	mu     sync.Mutex
	closed chan struct{}
	once   sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "sandbox" }
