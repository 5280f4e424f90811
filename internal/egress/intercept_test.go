package egress

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// testPKI is a CA of the test's own, standing for the public roots, and a
// server certificate it signed for the test's names.
type testPKI struct {
	pool   *x509.CertPool
	server tls.Certificate
}

func newTestPKI(t testing.TB, names ...string) *testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "test root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{pool: x509.NewCertPool(), server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
	p.pool.AddCert(ca)
	return p
}

// seen is what the HTTPS server got in one request.
type seen struct {
	Method, Path, Proto, Auth, Key string
}

type tlsServer struct {
	port int
	mu   sync.Mutex
	got  []seen
}

func (s *tlsServer) last() seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		return seen{}
	}
	return s.got[len(s.got)-1]
}

func (s *tlsServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *tlsServer) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := json.Marshal(s.got)
	return string(b)
}

// startTLSServer serves HTTPS (HTTP/2 and HTTP/1.1) on 127.0.0.1 with
// pki's certificate; it echoes the Authorization header it got in
// X-Echo, as a careless server might.
func startTLSServer(t testing.TB, pki *testPKI) *tlsServer {
	t.Helper()
	s := &tlsServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.got = append(s.got, seen{r.Method, r.URL.Path, r.Proto, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")})
		s.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		if r.Header.Get("Upgrade") == "websocket" {
			// Not a real WebSocket: the upgrade, then an echo of bytes.
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			io.Copy(c, brw)
			return
		}
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 1<<20))
			return
		}
		if r.URL.Path == "/repos/bigecho" {
			w.Header().Set("Content-Length", strconv.Itoa(len(bigEcho(r.Header.Get("Authorization")))))
			w.Write(bigEcho(r.Header.Get("Authorization")))
			return
		}
		if r.URL.Path == "/v1/chat" {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "got %d bytes", n)
			return
		}
		if r.URL.Path == "/body" {
			io.Copy(w, r.Body)
			return
		}
		if r.URL.Path == "/repos/echo" {
			fmt.Fprintf(w, "you sent %s, and again: %s.", r.Header.Get("Authorization"), r.Header.Get("Authorization"))
			return
		}
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.server}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return s
}

type interceptFixture struct {
	srv     *tlsServer
	pki     *testPKI
	ca      *CA
	proxy   *Proxy
	sb      *Sandbox
	url     *url.URL
	logs    *syncBuffer
	decided chan Decision
	// noDeadlines makes the sandbox's connections ignore read deadlines,
	// as the agent's tunnel does.
	noDeadlines atomic.Bool
}

type noDeadlineConn struct{ net.Conn }

func (noDeadlineConn) SetReadDeadline(time.Time) error { return nil }
func (noDeadlineConn) SetDeadline(time.Time) error     { return nil }

const realSecret = "real-secret-9d2e"

func newInterceptFixture(t testing.TB, edit func(o *Options)) *interceptFixture {
	t.Helper()
	f := &interceptFixture{pki: newTestPKI(t, "api.test", "other.test", "tunnel.test"), logs: &syncBuffer{}, decided: make(chan Decision, 100)}
	f.srv = startTLSServer(t, f.pki)
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f.ca = ca
	lo := [][]netip.Addr{{netip.MustParseAddr("127.0.0.1")}}
	res := &stubResolver{calls: map[string]int{}, answers: map[string][][]netip.Addr{"api.test": lo, "other.test": lo, "tunnel.test": lo, "plain.test": lo}}
	opts := Options{
		Logger:        slog.New(slog.NewJSONHandler(f.logs, nil)),
		Resolver:      res,
		Dial:          (&recorder{t: t}).dial,
		Limits:        Limits{RequestsPerSecond: 1000, Burst: 1000},
		CA:            ca,
		UpstreamRoots: f.pki.pool,
		Decided:       func(d Decision) { f.decided <- d },
		Secrets: []Secret{
			{Name: "GH", Hosts: []string{"api.test"}, Value: realSecret},
			{Host: "api.test", Header: "X-Api-Key", Template: "key {}", Value: "hdr-secret-77"},
			{Name: "OTHER", Hosts: []string{"other.test"}, Value: "other-secret"},
		},
		Rules: []HostRule{
			{Host: "api.test", Allow: []string{"GET /repos/**", "POST /v1/chat", "GET /big"}, Deny: []string{"* /repos/*/admin/**"}},
			{Host: "plain.test", Deny: []string{"POST /**"}},
		},
	}
	if edit != nil {
		edit(&opts)
	}
	f.proxy = New(opts)
	p := f.srv.port
	sb, err := f.proxy.Attach("sb1", sandbox.Network{Mode: sandbox.NetworkEgress,
		AllowHosts:     []string{fmt.Sprintf("api.test:%d", p), fmt.Sprintf("other.test:%d", p), fmt.Sprintf("tunnel.test:%d", p), fmt.Sprintf("plain.test:%d", p)},
		AllowAddresses: []string{fmt.Sprintf("127.0.0.1:%d", p)},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.sb = sb
	t.Cleanup(sb.Close)
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
			if f.noDeadlines.Load() {
				c = noDeadlineConn{c}
			}
			go sb.ServeConn(c)
		}
	}()
	f.url = &url.URL{Scheme: "http", Host: ln.Addr().String()}
	return f
}

// client trusts roots only; h2 says whether it offers HTTP/2.
func (f *interceptFixture) client(roots *x509.CertPool, h2 bool) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(f.url), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (f *interceptFixture) sandboxRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.ca.CertPEM())
	return pool
}

func (f *interceptFixture) placeholder(t *testing.T, name string) string {
	t.Helper()
	for _, kv := range f.sb.Env() {
		if v, ok := strings.CutPrefix(kv, SecretEnvPrefix+name+"="); ok {
			return v
		}
	}
	t.Fatalf("no placeholder for %s in %v", name, f.sb.Env())
	return ""
}

type result struct {
	status      int
	proto, body string
	echo        string
	resp        *http.Response
	readErr     error // how reading the body ended, if not at its end
}

func do(t *testing.T, c *http.Client, method, u string, hdr map[string]string) result {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader("body"))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, proto: resp.Proto, body: string(b), echo: resp.Header.Get("X-Echo"), resp: resp, readErr: err}
}

func TestInterceptSecretsAndRules(t *testing.T) {
	f := newInterceptFixture(t, nil)
	ph := f.placeholder(t, "GH")
	if strings.Contains(strings.Join(f.sb.Env(), " "), realSecret) {
		t.Fatal("the sandbox's environment holds the secret")
	}
	base := fmt.Sprintf("https://api.test:%d", f.srv.port)
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			c := f.client(f.sandboxRoots(), h2)
			wantProto := "HTTP/1.1"
			if h2 {
				wantProto = "HTTP/2.0"
			}
			// An allowed GET: the placeholder becomes the secret, the
			// header template is set, the echo comes back redacted.
			r := do(t, c, "GET", base+"/repos/o/r?token=q", map[string]string{"Authorization": "Bearer " + ph, "X-Api-Key": "forged"})
			if r.status != 200 || r.body != "hello GET /repos/o/r" || r.proto != wantProto {
				t.Fatalf("allowed GET: %d %s %q", r.status, r.proto, r.body)
			}
			got := f.srv.last()
			if got.Auth != "Bearer "+realSecret || got.Key != "key hdr-secret-77" || got.Proto != wantProto {
				t.Fatalf("the server got %+v", got)
			}
			if r.echo != "Bearer [REDACTED]" {
				t.Fatalf("an echoed secret reached the client: %q", r.echo)
			}
			r = do(t, c, "GET", base+"/repos/echo", map[string]string{"Authorization": "Bearer " + ph})
			if want := "you sent Bearer " + strings.Repeat("*", len(realSecret)) + ", and again: Bearer " + strings.Repeat("*", len(realSecret)) + "."; r.body != want {
				t.Fatalf("an echoing body reached the client as %q, want %q", r.body, want)
			}
			// A POST to a path the allow list does not name.
			n := f.srv.count()
			r = do(t, c, "POST", base+"/repos/o/r", nil)
			if r.status != 403 || !strings.Contains(r.body, `rule "l7 api.test allow"`) || !strings.Contains(r.body, "POST /repos/o/r is not among") {
				t.Fatalf("denied POST: %d %q", r.status, r.body)
			}
			// A path a deny rule names, and a non-canonical one.
			r = do(t, c, "GET", base+"/repos/o/admin/x", nil)
			if r.status != 403 || !strings.Contains(r.body, `l7 api.test deny \"* /repos/*/admin/**\"`) {
				t.Fatalf("denied path: %d %q", r.status, r.body)
			}
			r = do(t, c, "GET", base+"/repos/o/%2e%2e/admin", nil)
			if r.status != 403 || !strings.Contains(r.body, "not canonical") {
				t.Fatalf("non-canonical path: %d %q", r.status, r.body)
			}
			if f.srv.count() != n {
				t.Fatalf("a refused request reached the server: %s", f.srv.all())
			}
			// The placeholder sent to a host its secret is not for.
			r = do(t, c, "GET", fmt.Sprintf("https://other.test:%d/x", f.srv.port), map[string]string{"Authorization": "Bearer " + ph})
			if r.status != 403 || !strings.Contains(r.body, `rule "secret-host GH"`) {
				t.Fatalf("placeholder to another host: %d %q", r.status, r.body)
			}
			if f.srv.count() != n {
				t.Fatalf("the request with another host's placeholder reached the server: %s", f.srv.all())
			}
		})
	}
	// The log and the decisions: path without query, secret names, never
	// a secret's value.
	logs := f.logs.waitFor(`"secret-host GH"`)
	for _, bad := range []string{realSecret, "hdr-secret-77", "token=q", ph} {
		if strings.Contains(logs, bad) {
			t.Fatalf("the log holds %q:\n%s", bad, logs)
		}
	}
	var found bool
	for len(f.decided) > 0 {
		d := <-f.decided
		if d.Method == "GET" && d.Path == "/repos/o/r" && d.Intercepted && d.Status == 200 && d.BytesReceived > 0 &&
			strings.Join(d.Secrets, ",") == "GH,header X-Api-Key" && d.IP == "127.0.0.1" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no decision for the intercepted GET with its secrets:\n%s", logs)
	}
	sum := f.sb.Summary()
	if sum.Denied < 8 || sum.BytesReceived == 0 {
		t.Fatalf("summary: %+v", sum)
	}
}

// TestInterceptPlainHTTP: the same rules and placeholders hold on plain
// HTTP.
func TestInterceptPlainHTTP(t *testing.T) {
	f := newInterceptFixture(t, nil)
	ph := f.placeholder(t, "GH")
	c := f.client(nil, false)
	// plain.test's port serves TLS; a refusal never gets there.
	r := do(t, c, "POST", fmt.Sprintf("http://plain.test:%d/x", f.srv.port), nil)
	if r.status != 403 || !strings.Contains(r.body, `l7 plain.test deny \"POST /**\"`) {
		t.Fatalf("plain POST: %d %q", r.status, r.body)
	}
	r = do(t, c, "GET", fmt.Sprintf("http://plain.test:%d/x", f.srv.port), map[string]string{"X-Token": ph})
	if r.status != 403 || !strings.Contains(r.body, "secret-host GH") {
		t.Fatalf("plain placeholder: %d %q", r.status, r.body)
	}
}

// TestInterceptFailsClosed: a client that trusts only the real roots (as
// one that pins does) fails; a host without rules is tunnelled, the
// client seeing the server's own certificate; an upstream the proxy
// cannot verify is refused; without a CA, an intercepted host is refused,
// never tunnelled.
func TestInterceptFailsClosed(t *testing.T) {
	f := newInterceptFixture(t, nil)
	pinned := f.client(f.pki.pool, true)
	_, err := pinned.Get(fmt.Sprintf("https://api.test:%d/repos/x", f.srv.port))
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client pinning the real CA got through the interception: %v", err)
	}
	f.logs.waitFor("intercept-handshake")
	if !strings.Contains(f.logs.String(), `"rule":"intercept-handshake"`) {
		t.Fatalf("the failed handshake is not logged:\n%s", f.logs)
	}
	r := do(t, pinned, "GET", fmt.Sprintf("https://tunnel.test:%d/any", f.srv.port), nil)
	if r.status != 200 || r.resp.TLS.PeerCertificates[0].Subject.CommonName != "api.test" {
		t.Fatalf("tunnelled host: %d, certificate %v", r.status, r.resp.TLS.PeerCertificates[0].Subject)
	}
	if f.srv.last().Path != "/any" {
		t.Fatal("the tunnelled request did not reach the server")
	}

	untrusted := newInterceptFixture(t, func(o *Options) { o.UpstreamRoots = x509.NewCertPool() })
	r = do(t, untrusted.client(untrusted.sandboxRoots(), true), "GET", fmt.Sprintf("https://api.test:%d/repos/x", untrusted.srv.port), nil)
	if r.status != 502 || !strings.Contains(r.body, "certificate is not trusted") {
		t.Fatalf("unverifiable upstream: %d %q", r.status, r.body)
	}
	if untrusted.srv.count() != 0 {
		t.Fatalf("the server answered a proxy it should not: %s", untrusted.srv.all())
	}

	noCA := newInterceptFixture(t, func(o *Options) { o.CA = nil })
	_, err = noCA.client(noCA.pki.pool, true).Get(fmt.Sprintf("https://api.test:%d/repos/x", noCA.srv.port))
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("without a CA, an intercepted host: %v", err)
	}
	if !strings.Contains(noCA.logs.waitFor("intercept-unavailable"), "intercept-unavailable") {
		t.Fatal("the refusal is not logged")
	}
	if noCA.srv.count() != 0 {
		t.Fatalf("the server was reached: %s", noCA.srv.all())
	}
}

func TestCAFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, caKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	again, err := LoadCA(dir)
	if err != nil || string(again.CertPEM()) != string(ca.CertPEM()) {
		t.Fatalf("reload: %v", err)
	}
	l1, _ := ca.leaf("api.test")
	l2, _ := ca.leaf("api.test")
	if l1 != l2 || l1.Leaf.NotAfter.Sub(l1.Leaf.NotBefore) > 26*time.Hour {
		t.Fatal("leaf not cached or long-lived")
	}
	if err := os.Chmod(filepath.Join(dir, caKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(dir); err == nil {
		t.Fatal("a readable CA key was accepted")
	}
}

func TestL7Patterns(t *testing.T) {
	for _, c := range []struct {
		pat, method, path string
		want              bool
	}{
		{"GET /repos/**", "GET", "/repos/a/b", true},
		{"GET /repos/**", "GET", "/repos", true},
		{"GET /repos/**", "POST", "/repos/a", false},
		{"* /v1/*/x", "PUT", "/v1/a/x", true},
		{"* /v1/*/x", "PUT", "/v1/a/b/x", false},
		{"POST /v1/chat/completions", "POST", "/v1/chat/completions", true},
		{"GET", "GET", "/anything", true},
		{"get /a/v*", "GET", "/a/v2", true},
	} {
		p, err := ParseL7(c.pat)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.matches(c.method, strings.Split(c.path[1:], "/")); got != c.want {
			t.Errorf("%q on %s %s: %v", c.pat, c.method, c.path, got)
		}
	}
	for _, bad := range []string{"", "GET repos", "G ET /x /y", "GET /[", "GE:T /"} {
		if _, err := ParseL7(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestInterceptConnectionClose: a client without ALPN that sends
// "Connection: close" and reads to the end (as Node's tls.connect does)
// gets the answer and then the end of the connection, also over a
// connection that ignores read deadlines (the agent's tunnel).
func TestInterceptConnectionClose(t *testing.T) {
	f := newInterceptFixture(t, nil)
	f.noDeadlines.Store(true)
	c, err := net.Dial("tcp", f.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	target := fmt.Sprintf("api.test:%d", f.srv.port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	var buf [64]byte
	n, err := c.Read(buf[:])
	if err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("CONNECT: %q %v", buf[:n], err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: f.sandboxRoots()})
	fmt.Fprintf(tc, "GET /repos/o/close HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	out, err := io.ReadAll(tc)
	if err != nil || !strings.HasSuffix(string(out), "hello GET /repos/o/close") {
		t.Fatalf("read to the end: %v\n%s", err, out)
	}
}

// TestInterceptWebSocket: an HTTP/1.1 upgrade to an intercepted host
// passes (with the secret put in), and bytes then flow both ways.
func TestInterceptWebSocket(t *testing.T) {
	f := newInterceptFixture(t, nil)
	f.noDeadlines.Store(true)
	c, err := net.Dial("tcp", f.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	target := fmt.Sprintf("api.test:%d", f.srv.port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	var buf [64]byte
	if n, err := c.Read(buf[:]); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("CONNECT: %q %v", buf[:n], err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: f.sandboxRoots(), NextProtos: []string{"http/1.1"}})
	fmt.Fprintf(tc, "GET /repos/ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer %s\r\n\r\n", f.placeholder(t, "GH"))
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v; the server got %s", resp, err, f.srv.all())
	}
	if got := f.srv.last(); got.Auth != "Bearer "+realSecret || got.Path != "/repos/ws" {
		t.Fatalf("the server got %+v", got)
	}
	for _, msg := range []string{"ping", "pong and more"} {
		if _, err := io.WriteString(tc, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("echo: %q %v", got, err)
		}
	}
}

// TestPlaceholdersStable: a sandbox attached again (the daemon restarted
// and reattached it) keeps its placeholders; another sandbox's differ.
func TestPlaceholdersStable(t *testing.T) {
	dir := t.TempDir()
	secrets := []Secret{{Name: "GH", Host: "api.test", Value: "v"}}
	env := func(id string) string {
		ca, err := LoadCA(dir)
		if err != nil {
			t.Fatal(err)
		}
		p := New(Options{CA: ca, Secrets: secrets})
		sb, err := p.Attach(id, sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{"api.test"}})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		return strings.Join(sb.Env(), " ")
	}
	a, again, b := env("sb-a"), env("sb-a"), env("sb-b")
	if a != again || a == b || !strings.Contains(a, "AIRLOCK_SECRET_GH=airlock-placeholder-gh-") || strings.Contains(a, "=v ") {
		t.Fatalf("placeholders: %s / %s / %s", a, again, b)
	}
}

// TestRedactor: a secret's value is masked in a body whatever the reads
// split it across, and the length stays.
func TestRedactor(t *testing.T) {
	body := "a secret-one b secret-onesecret-one c secret-tw secret-two! secret-on"
	want := "a ********** b ******************** c secret-tw **********! secret-on"
	for _, one := range []bool{false, true} {
		var r io.Reader = strings.NewReader(body)
		if one {
			r = iotest.OneByteReader(r)
		}
		resp := &http.Response{Header: http.Header{}, Body: io.NopCloser(r)}
		redactBody(resp, []compiledSecret{{Secret: Secret{Value: "secret-one"}}, {Secret: Secret{Value: "secret-two"}}})
		got, err := io.ReadAll(iotest.OneByteReader(resp.Body))
		if err != nil || string(got) != want {
			t.Fatalf("one byte reads %v: %q %v, want %q", one, got, err, want)
		}
	}
	gz := &http.Response{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: io.NopCloser(strings.NewReader("x"))}
	redactBody(gz, []compiledSecret{{Secret: Secret{Value: "x"}}})
	if _, ok := gz.Body.(*redactor); ok {
		t.Fatal("a compressed body was wrapped")
	}
}

// TestInterceptUpload: a large request body streams through an
// intercepted host, over HTTP/2 and HTTP/1.1, and is counted.
func TestInterceptUpload(t *testing.T) {
	f := newInterceptFixture(t, nil)
	for _, h2 := range []bool{true, false} {
		c := f.client(f.sandboxRoots(), h2)
		req, _ := http.NewRequest("POST", fmt.Sprintf("https://api.test:%d/v1/chat", f.srv.port), strings.NewReader(strings.Repeat("x", 5<<20)))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != fmt.Sprintf("got %d bytes", 5<<20) {
			t.Fatalf("h2=%v: %d %q", h2, resp.StatusCode, b)
		}
	}
	if !strings.Contains(f.logs.waitFor(`"bytes_sent":5242880`), `"bytes_sent":5242880`) {
		t.Fatalf("the upload's bytes are not logged:\n%s", f.logs)
	}
}

// bigEcho is a 3 MiB body with v written into it where reads are likely
// to split it: about the read-ahead's and TLS's chunk sizes, and at the end.
func bigEcho(v string) []byte {
	b := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	for _, at := range []int{0, readAheadChunk - 3, 2*readAheadChunk + 1, 16<<10 - 5, 1<<20 - 7, len(b) - len(v)} {
		copy(b[at:], v)
	}
	return b
}

// TestInterceptLargeBody: a body larger than the read-ahead holds, with
// the secret echoed across chunk boundaries, reaches the client whole and
// masked, over HTTP/1.1 (read ahead, its records written in batches) and
// HTTP/2, with and without read deadlines on the sandbox's connection.
func TestInterceptLargeBody(t *testing.T) {
	f := newInterceptFixture(t, nil)
	ph := f.placeholder(t, "GH")
	want := bigEcho("Bearer " + strings.Repeat("*", len(realSecret)))
	for _, h2 := range []bool{true, false} {
		for _, noDeadlines := range []bool{false, true} {
			t.Run(fmt.Sprintf("h2=%v/nodeadlines=%v", h2, noDeadlines), func(t *testing.T) {
				f.noDeadlines.Store(noDeadlines)
				c := f.client(f.sandboxRoots(), h2)
				defer c.CloseIdleConnections()
				for range 3 {
					r := do(t, c, "GET", fmt.Sprintf("https://api.test:%d/repos/bigecho", f.srv.port), map[string]string{"Authorization": "Bearer " + ph})
					if r.status != 200 || r.body != string(want) {
						t.Fatalf("status %d, %d bytes of %d, equal %v, holds the secret %v, the body's read ended with %v", r.status, len(r.body), len(want), r.body == string(want), strings.Contains(r.body, realSecret), r.readErr)
					}
				}
			})
		}
	}
}
