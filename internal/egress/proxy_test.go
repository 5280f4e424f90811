package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// stubResolver maps test names to addresses; a name with several answers
// gives the next one on each lookup (DNS rebinding).
type stubResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func (r *stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.calls[host], len(a)-1)
	r.calls[host]++
	return a[i], nil
}

// recorder dials only loopback addresses for real and records every
// address it was asked for; anything else fails the test.
type recorder struct {
	t     testing.TB
	mu    sync.Mutex
	dials []string
}

func (r *recorder) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.dials = append(r.dials, addr)
	r.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() || !ap.Addr().IsLoopback() {
		r.t.Errorf("the proxy dialed %s", addr)
		return nil, fmt.Errorf("test refuses to dial %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (r *recorder) dialed(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.dials {
		if d == addr {
			return true
		}
	}
	return false
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// waitFor returns the logs once they contain want, or after 2 s. A
// decision is logged when the request ends, just after the client has its
// answer.
func (b *syncBuffer) waitFor(want string) string {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s := b.String(); strings.Contains(s, want) {
			return s
		}
	}
	return b.String()
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// server is a test HTTP server on one loopback address that counts hits
// and echoes the Authorization header it got.
type server struct {
	addr netip.AddrPort
	hits atomic.Int64
	auth atomic.Value
}

func startServer(t *testing.T, ip string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s := &server{addr: netip.MustParseAddrPort(ln.Addr().String())}
	big := bytes.Repeat([]byte("x"), 1<<20)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.auth.Store(r.Header.Get("Authorization"))
		switch {
		case r.Method == "TRACE": // RFC 9110: the request, reflected
			w.Header().Set("Content-Type", "message/http")
			fmt.Fprintf(w, "TRACE %s HTTP/1.1\r\n", r.URL.RequestURI())
			r.Header.Write(w)
			return
		case r.URL.Path == "/reflect-header":
			w.Header().Set("X-Echo", "you sent "+r.Header.Get("Authorization"))
		}
		if r.URL.Path == "/big" {
			w.Write(big)
			return
		}
		fmt.Fprintf(w, "hello from %s", s.addr)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

type fixture struct {
	a, b  *server // a on 127.0.0.1 (allowed by address), b on 127.0.0.2 (never allowed)
	res   *stubResolver
	rec   *recorder
	logs  *syncBuffer
	proxy *Proxy
	sb    *Sandbox
	url   *url.URL
}

func newFixture(t *testing.T, lim Limits, secrets []Secret, edit func(n *sandbox.Network, a, b *server)) *fixture {
	t.Helper()
	f := &fixture{a: startServer(t, "127.0.0.1"), b: startServer(t, "127.0.0.2"), logs: &syncBuffer{}}
	a, b := f.a.addr, f.b.addr
	one := func(ips ...string) [][]netip.Addr {
		var out []netip.Addr
		for _, ip := range ips {
			out = append(out, netip.MustParseAddr(ip))
		}
		return [][]netip.Addr{out}
	}
	f.res = &stubResolver{calls: map[string]int{}, answers: map[string][][]netip.Addr{
		"allowed.test":  one("127.0.0.1"),
		"b.test":        one("127.0.0.2"),
		"unlisted.test": one("127.0.0.1"),
		"rebind.test":   {{netip.MustParseAddr("127.0.0.1")}, {netip.MustParseAddr("127.0.0.2")}},
		"metadata.test": one("169.254.169.254"),
		"private.test":  one("10.0.0.1"),
		"mapped.test":   one("::ffff:127.0.0.1"),
		"mapped-b.test": one("::ffff:127.0.0.2"),
		"nat64.test":    one("64:ff9b::7f00:1"),
		"ula.test":      one("fd00:ec2::254"),
		"multi.test":    one("10.0.0.1", "127.0.0.1"),
	}}
	f.rec = &recorder{t: t}
	n := sandbox.Network{
		Mode: sandbox.NetworkEgress,
		AllowHosts: []string{
			fmt.Sprintf("allowed.test:%d", a.Port()), fmt.Sprintf("*.allowed.test:%d", a.Port()),
			fmt.Sprintf("b.test:%d", b.Port()), fmt.Sprintf("rebind.test:%d", a.Port()), fmt.Sprintf("rebind.test:%d", b.Port()),
			"metadata.test", "private.test", fmt.Sprintf("mapped.test:%d", a.Port()), fmt.Sprintf("mapped-b.test:%d", b.Port()), "nat64.test", "ula.test",
			fmt.Sprintf("multi.test:%d", a.Port()), "denied.allowed.test:" + fmt.Sprint(a.Port()),
		},
		AllowAddresses: []string{a.String()},
		Deny:           []string{"denied.allowed.test"},
	}
	if edit != nil {
		edit(&n, f.a, f.b)
	}
	f.proxy = New(Options{
		Logger:   slog.New(slog.NewJSONHandler(f.logs, nil)),
		Resolver: f.res,
		Dial:     f.rec.dial,
		Limits:   lim,
		Secrets:  secrets,
	})
	sb, err := f.proxy.Attach("sb1", n)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	f.sb = sb
	t.Cleanup(sb.Close)
	// The listener plays the sandbox's tunnel: every connection it accepts
	// belongs to sb1.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sb.ServeConn(c)
		}
	}()
	f.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return f
}

func (f *fixture) client() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(f.url)}, Timeout: 10 * time.Second}
}

// get fetches u through the proxy and returns the status and body.
func (f *fixture) get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := f.client().Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// connect sends a CONNECT for target on a raw connection and returns the
// answer and the connection (the tunnel, on 200).
func (f *fixture) connect(t *testing.T, target string) (*http.Response, string, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", f.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: no HTTP answer: %v", target, err)
	}
	var body string
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
	}
	return resp, body, c, br
}

func TestProxyRules(t *testing.T) {
	f := newFixture(t, Limits{RequestsPerSecond: 1000, Burst: 1000}, nil, nil)
	a, b := f.a.addr, f.b.addr
	tests := []struct {
		name     string
		url      string
		status   int
		contains string
	}{
		{name: "allowed name", url: fmt.Sprintf("http://allowed.test:%d/", a.Port()), status: 200, contains: "hello from " + a.String()},
		{name: "wildcard", url: fmt.Sprintf("http://x.y.allowed.test:%d/", a.Port()), status: 502},
		{name: "allowed address literal", url: fmt.Sprintf("http://%s/", a), status: 200, contains: "hello"},
		{name: "deny wins", url: fmt.Sprintf("http://denied.allowed.test:%d/", a.Port()), status: 403, contains: `rule "deny denied.allowed.test"`},
		{name: "not allowlisted", url: fmt.Sprintf("http://unlisted.test:%d/", a.Port()), status: 403, contains: "not-allowlisted unlisted.test"},
		{name: "allowed name other port", url: "http://allowed.test:1/", status: 403, contains: "not-allowlisted"},
		{name: "loopback by name", url: fmt.Sprintf("http://b.test:%d/", b.Port()), status: 403, contains: `"blocked loopback"`},
		{name: "loopback literal", url: fmt.Sprintf("http://%s/", b), status: 403, contains: "ip-literal"},
		{name: "decimal", url: fmt.Sprintf("http://2130706434:%d/", b.Port()), status: 403, contains: "ip-literal 127.0.0.2"},
		{name: "octal", url: fmt.Sprintf("http://0177.0.0.2:%d/", b.Port()), status: 403, contains: "ip-literal 127.0.0.2"},
		{name: "hex", url: fmt.Sprintf("http://0x7f000002:%d/", b.Port()), status: 403, contains: "ip-literal 127.0.0.2"},
		{name: "short", url: fmt.Sprintf("http://127.2:%d/", b.Port()), status: 403, contains: "ip-literal 127.0.0.2"},
		{name: "short of allowed is allowed address", url: fmt.Sprintf("http://127.1:%d/", a.Port()), status: 200},
		{name: "mapped literal", url: fmt.Sprintf("http://[::ffff:127.0.0.2]:%d/", b.Port()), status: 403, contains: "ip-literal"},
		// Go's resolver answers ::ffff:a.b.c.d for names in /etc/hosts: the
		// address is the IPv4 one, for allow-address and for the blocks.
		{name: "mapped answer of an allowed address", url: fmt.Sprintf("http://mapped.test:%d/", a.Port()), status: 200, contains: "hello from " + a.String()},
		{name: "mapped answer of another address", url: fmt.Sprintf("http://mapped-b.test:%d/", b.Port()), status: 403, contains: `"blocked loopback"`},
		{name: "metadata name", url: "http://metadata.test/", status: 403, contains: "blocked metadata"},
		{name: "metadata literal", url: "http://169.254.169.254/latest/meta-data/", status: 403, contains: "ip-literal"},
		{name: "metadata decimal", url: "http://2852039166/", status: 403, contains: "ip-literal 169.254.169.254"},
		{name: "private name", url: "http://private.test/", status: 403, contains: "blocked private"},
		{name: "nat64 name", url: "http://nat64.test/", status: 403, contains: "blocked nat64"},
		{name: "ula metadata name", url: "http://ula.test/", status: 403, contains: "blocked metadata"},
		{name: "first private answer skipped", url: fmt.Sprintf("http://multi.test:%d/", a.Port()), status: 200},
		{name: "unresolvable", url: fmt.Sprintf("http://x.allowed.test:%d/", a.Port()), status: 502, contains: "does not resolve"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := f.get(t, tt.url)
			if status != tt.status || !strings.Contains(body, tt.contains) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tt.url, status, body, tt.status, tt.contains)
			}
		})
	}
	if n := f.b.hits.Load(); n != 0 {
		t.Fatalf("the never-allowed server on 127.0.0.2 got %d requests", n)
	}
	for _, never := range []string{b.String(), "169.254.169.254:80", "10.0.0.1:80", "[fd00:ec2::254]:80", "[64:ff9b::7f00:1]:80", fmt.Sprintf("10.0.0.1:%d", a.Port())} {
		if f.rec.dialed(never) {
			t.Fatalf("the proxy dialed %s", never)
		}
	}
	// One line per decision, with the rule.
	time.Sleep(50 * time.Millisecond)
	logs := f.logs.String()
	if n := strings.Count(logs, `"msg":"egress"`); n != len(tests) {
		t.Fatalf("%d decision lines for %d requests:\n%s", n, len(tests), logs)
	}
	if !strings.Contains(logs, `"host":"metadata.test"`) || !strings.Contains(logs, `"ip":"169.254.169.254"`) || !strings.Contains(logs, `"rule":"blocked metadata"`) {
		t.Fatalf("the metadata decision is not logged with host, ip and rule:\n%s", logs)
	}
	sum := f.sb.Summary()
	if sum.Requests != int64(len(tests)) || sum.Allowed < 4 || sum.Denied < 15 || sum.BytesReceived == 0 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestRebinding(t *testing.T) {
	f := newFixture(t, Limits{}, nil, nil)
	u := fmt.Sprintf("http://rebind.test:%d/", f.a.addr.Port())
	if status, _ := f.get(t, u); status != 200 {
		t.Fatalf("first lookup (127.0.0.1, allowed): status %d", status)
	}
	// The name now points at 127.0.0.2, which is loopback and not allowed.
	u = fmt.Sprintf("http://rebind.test:%d/", f.b.addr.Port())
	status, body := f.get(t, u)
	if status != 403 || !strings.Contains(body, "blocked loopback") {
		t.Fatalf("rebound lookup: %d %q, want 403 blocked loopback", status, body)
	}
	if f.b.hits.Load() != 0 || f.rec.dialed(f.b.addr.String()) {
		t.Fatal("the rebound address was dialed")
	}
}

func TestConnect(t *testing.T) {
	f := newFixture(t, Limits{}, nil, nil)
	a := f.a.addr
	// A tunnel to the allowed server carries a request.
	resp, _, c, br := f.connect(t, fmt.Sprintf("allowed.test:%d", a.Port()))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT allowed: %s", resp.Status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request through the tunnel: %v", err)
	}
	body, _ := io.ReadAll(inner.Body)
	if !strings.Contains(string(body), "hello") {
		t.Fatalf("tunnel answer %q", body)
	}
	tests := []struct{ target, contains string }{
		{target: "allowed.test:22", contains: "not-allowlisted allowed.test:22"},
		{target: "169.254.169.254:443", contains: "ip-literal"},
		{target: "[::ffff:127.0.0.2]:443", contains: "ip-literal"},
		{target: "metadata.test:443", contains: "blocked metadata"},
		{target: fmt.Sprintf("b.test:%d", f.b.addr.Port()), contains: "blocked loopback"},
		{target: "unlisted.test:443", contains: "not-allowlisted"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			resp, body, _, _ := f.connect(t, tt.target)
			if resp.StatusCode != 403 || !strings.Contains(body, tt.contains) {
				t.Fatalf("CONNECT %s: %s %q, want 403 containing %q", tt.target, resp.Status, body, tt.contains)
			}
			if strings.Contains(body, "dial") || strings.Contains(body, "connect:") {
				t.Fatalf("the refusal echoes internal error text: %q", body)
			}
		})
	}
	if f.b.hits.Load() != 0 {
		t.Fatal("the never-allowed server got a request")
	}
}

func TestRateLimit(t *testing.T) {
	f := newFixture(t, Limits{RequestsPerSecond: 1, Burst: 5}, nil, nil)
	u := fmt.Sprintf("http://allowed.test:%d/", f.a.addr.Port())
	codes := map[int]int{}
	for range 30 {
		status, body := f.get(t, u)
		codes[status]++
		if status == 429 && !strings.Contains(body, `rule "rate-limit"`) {
			t.Fatalf("429 body %q does not name the rule", body)
		}
	}
	if codes[200] < 5 || codes[200] > 7 || codes[429] < 23 {
		t.Fatalf("30 requests at once with burst 5: %v", codes)
	}
	if hits := f.a.hits.Load(); hits != int64(codes[200]) {
		t.Fatalf("the server got %d requests, the proxy let %d through", hits, codes[200])
	}
	// A storm does not flood the log: limit refusals are sampled.
	logs := f.logs.String()
	if n := strings.Count(logs, `"rule":"rate-limit"`); n < 1 || n > 2 {
		t.Fatalf("%d rate-limit lines for %d refusals:\n%s", n, codes[429], logs)
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFixture(t, Limits{MaxConns: 1}, nil, nil)
	resp, _, _, _ := f.connect(t, fmt.Sprintf("allowed.test:%d", f.a.addr.Port()))
	if resp.StatusCode != 200 {
		t.Fatalf("first CONNECT: %s", resp.Status)
	}
	resp, body, _, _ := f.connect(t, fmt.Sprintf("allowed.test:%d", f.a.addr.Port()))
	if resp.StatusCode != 429 || !strings.Contains(body, "connection-cap") {
		t.Fatalf("second connection: %s %q, want 429 connection-cap", resp.Status, body)
	}
}

func TestByteBudget(t *testing.T) {
	const budget = 100 << 10
	f := newFixture(t, Limits{MaxBytes: budget}, nil, nil)
	resp, err := f.client().Get(fmt.Sprintf("http://allowed.test:%d/big", f.a.addr.Port()))
	if err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n >= 1<<20 {
			t.Fatalf("downloaded %d bytes past a budget of %d", n, budget)
		}
	}
	if used := f.sb.bytesUsed(); used > budget {
		t.Fatalf("%d bytes used, budget %d", used, budget)
	}
	status, body := f.get(t, fmt.Sprintf("http://allowed.test:%d/", f.a.addr.Port()))
	if status != 403 || !strings.Contains(body, "byte-budget") {
		t.Fatalf("after the budget: %d %q, want 403 byte-budget", status, body)
	}
}

func TestReportMode(t *testing.T) {
	f := newFixture(t, Limits{}, nil, func(n *sandbox.Network, a, b *server) {
		n.Report = true
		n.Deny = append(n.Deny, "127.0.0.1/32")
	})
	u := fmt.Sprintf("http://unlisted.test:%d/", f.a.addr.Port())
	status, _ := f.get(t, u)
	if status != 200 {
		t.Fatalf("report mode: GET unlisted = %d, want 200", status)
	}
	logs := f.logs.waitFor(`"decision":"would_deny"`)
	if !strings.Contains(logs, `"decision":"would_deny"`) || !strings.Contains(logs, "not-allowlisted unlisted.test") {
		t.Fatalf("report mode did not log what it would deny:\n%s", logs)
	}
	// The private-range block holds in report mode.
	status, body := f.get(t, "http://metadata.test/")
	if status != 403 || !strings.Contains(body, "blocked metadata") {
		t.Fatalf("report mode let metadata through: %d %q", status, body)
	}
	status, _ = f.get(t, fmt.Sprintf("http://b.test:%d/", f.b.addr.Port()))
	if status != 403 || f.b.hits.Load() != 0 {
		t.Fatalf("report mode let loopback through: %d", status)
	}
	f.logs.waitFor(`"host":"b.test"`)
	sum := f.sb.Summary()
	if sum.Mode != "report" || sum.WouldDeny != 1 || sum.Denied != 2 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestSecretInjection(t *testing.T) {
	const secret = "Bearer s3cret-value"
	f := newFixture(t, Limits{}, []Secret{{Host: "Allowed.Test", Header: "Authorization", Value: secret}}, nil)
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/", f.a.addr.Port()), nil)
	req.Header.Set("Authorization", "Bearer forged")
	resp, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := f.a.auth.Load(); got != secret {
		t.Fatalf("the server got Authorization %q, want the injected secret", got)
	}
	// Another host (the allowed address as a literal) does not get it.
	f.get(t, fmt.Sprintf("http://%s/", f.a.addr))
	if got := f.a.auth.Load(); got != "" {
		t.Fatalf("a request to another host got Authorization %q", got)
	}
	if strings.Contains(f.logs.String(), "s3cret") {
		t.Fatal("the secret appears in the logs")
	}
	if s := fmt.Sprint(Secret{Value: secret}); strings.Contains(s, "s3cret") {
		t.Fatalf("formatting a Secret shows it: %s", s)
	}
}

// TestDialerControl checks the default dialer's last check without
// dialing: Control refuses before connect().
func TestDialerControl(t *testing.T) {
	p := New(Options{})
	sb, err := p.Attach("x", sandbox.Network{Mode: sandbox.NetworkEgress, AllowAddresses: []string{"127.0.0.1:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	for _, tt := range []struct {
		addr  string
		allow bool
	}{
		{"169.254.169.254:80", false},
		{"127.0.0.1:8081", false},
		{"[::ffff:127.0.0.1]:8080", false},
		{"[::1]:8080", false},
		{"10.0.0.1:443", false},
		{"127.0.0.1:8080", true},
		{"8.8.8.8:443", true},
	} {
		err := sb.control("tcp4", tt.addr, syscall.RawConn(nil))
		if (err == nil) != tt.allow {
			t.Errorf("control(%s) = %v, want allow=%v", tt.addr, err, tt.allow)
		}
	}
}

// TestSecretNotReflected: an injected secret goes only with methods that
// do not reflect the request (TRACE echoes it back: the security review's
// F12 read the secret inside the sandbox that way), and it is masked in the
// headers of the answer.
func TestSecretNotReflected(t *testing.T) {
	const secret = "Bearer s3cret-value"
	f := newFixture(t, Limits{}, []Secret{{Host: "allowed.test", Header: "Authorization", Value: secret}}, nil)
	u := fmt.Sprintf("http://allowed.test:%d/trace", f.a.addr.Port())
	for _, method := range []string{"TRACE", "TRACK", "OPTIONS", "PROPFIND"} {
		hits := f.a.hits.Load()
		req, _ := http.NewRequest(method, u, nil)
		resp, err := f.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "s3cret") || resp.StatusCode != http.StatusForbidden || f.a.hits.Load() != hits {
			t.Fatalf("%s to a host with an injected secret: %d %q (forwarded: %v)", method, resp.StatusCode, body, f.a.hits.Load() != hits)
		}
	}
	// A method that goes gets the secret; the answer's headers do not carry it back.
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://allowed.test:%d/reflect-header", f.a.addr.Port()), nil)
	resp, err := f.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := f.a.auth.Load(); got != secret {
		t.Fatalf("GET did not get the secret: %q", got)
	}
	if h := resp.Header.Get("X-Echo"); strings.Contains(h, "s3cret") || !strings.Contains(h, "[REDACTED]") {
		t.Fatalf("the answer's header carried the secret back: %q", h)
	}
	// Other hosts are not limited.
	req, _ = http.NewRequest("OPTIONS", fmt.Sprintf("http://%s/", f.a.addr), nil)
	if resp, err := f.client().Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("OPTIONS to a host without a secret: %v %v", resp, err)
	}
}

// TestMalformedRequests: a request the proxy cannot parse gets a 400 that
// says so, not a closed socket, and the decision is logged.
func TestMalformedRequests(t *testing.T) {
	f := newFixture(t, Limits{}, nil, nil)
	for name, raw := range map[string]string{
		"bad host":       "GET http://127.0.0.1%2e:17180/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"bad port":       "CONNECT 127.0.0.1:-1 HTTP/1.1\r\nHost: 127.0.0.1:-1\r\n\r\n",
		"duplicate Host": "GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n",
		"HTTP/0.9":       "GET /\r\n\r\n",
	} {
		c, err := net.Dial("tcp", f.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, raw)
		got, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(got), "HTTP/1.1 400 ") || !strings.Contains(string(got), "airlock egress: malformed request") {
			t.Errorf("%s: got %q, want a 400 that names the problem", name, got)
		}
	}
	if f.a.hits.Load() != 0 {
		t.Fatal("a malformed request reached the server")
	}
	if logs := f.logs.waitFor(`"rule":"bad-request"`); !strings.Contains(logs, `"rule":"bad-request"`) {
		t.Fatalf("no decision logged:\n%s", logs)
	}
}
