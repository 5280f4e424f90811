package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func egressCases() []testCase {
	return []testCase{
		{name: "allow_and_refuse", needs: []need{needShell, needEgress}, run: testEgress},
		{name: "unread_download", alone: true, needs: []need{needShell, needEgress}, run: testUnreadDownload},
		{name: "loopback_clients", needs: []need{needShell, needEgress}, run: testLoopbackClients},
		{name: "intercept", needs: []need{needShell, needEgress}, run: testIntercept},
	}
}

// egressSecret is the header the proxy adds to requests to allowed.test;
// the sandbox must never see it.
const egressSecret = "Bearer sandbox-never-sees-this-7f3a"

// egressEnv is an egress case's world on the host: the proxy, a server on
// 127.0.0.1 the sandbox may reach (by name, and by its address, which an
// allow-address names), and one on 127.0.0.2 it may never reach.
type egressEnv struct {
	proxy *egress.Proxy
	a, b  *egressServer
	logs  syncBuffer
	// tls is the HTTPS server the interception cases reach (intercept.go).
	tls *tlsServer
	// caPEM is the proxy's CA, which sandboxes trust and the host not.
	caPEM []byte
}

func startEgress(t *testing.T) *egressEnv {
	t.Helper()
	ee := &egressEnv{a: startEgressServer(t, "127.0.0.1"), b: startEgressServer(t, "127.0.0.2"), tls: startTLSServer(t)}
	ca, err := egress.LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ee.caPEM = ca.CertPEM()
	ee.proxy = egress.New(egress.Options{
		Logger: slog.New(slog.NewJSONHandler(&ee.logs, nil)),
		Resolver: nameResolver{"allowed.test": "127.0.0.1", "b.test": "127.0.0.2", "unlisted.test": "127.0.0.1",
			"api.test": "127.0.0.1", "other.test": "127.0.0.1", "tunnel.test": "127.0.0.1"},
		Secrets:       append([]egress.Secret{{Host: "allowed.test", Header: "Authorization", Value: egressSecret}}, interceptSecrets...),
		Rules:         interceptRules,
		CA:            ca,
		UpstreamRoots: ee.tls.pool,
	})
	return ee
}

// network is the sandbox's network: allowed.test and b.test by name (b.test
// resolves to a private address, so the proxy refuses it anyway), and the
// allowed server's address.
func (ee *egressEnv) network() sandbox.Network {
	return sandbox.Network{
		Mode: sandbox.NetworkEgress,
		AllowHosts: []string{fmt.Sprintf("allowed.test:%d", ee.a.port), fmt.Sprintf("b.test:%d", ee.b.port),
			fmt.Sprintf("api.test:%d", ee.tls.port), fmt.Sprintf("other.test:%d", ee.tls.port), fmt.Sprintf("tunnel.test:%d", ee.tls.port)},
		AllowAddresses: []string{fmt.Sprintf("127.0.0.1:%d", ee.a.port), fmt.Sprintf("127.0.0.1:%d", ee.tls.port)},
	}
}

// nameResolver maps the test's names to loopback addresses.
type nameResolver map[string]string

func (r nameResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ip, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(ip)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type egressServer struct {
	port int
	hits atomic.Int64
	mu   sync.Mutex
	auth []string
}

func startEgressServer(t *testing.T, ip string) *egressServer {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s := &egressServer{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			// 32 MiB, for a client that never reads it.
			w.Header().Set("Content-Length", fmt.Sprint(32<<20))
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for range 32 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		s.hits.Add(1)
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		fmt.Fprintf(w, "answer from %s", ip)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

// egressProbe runs in the sandbox and prints one JSON object: what each
// attempt got ("200 ...", "403 ...", or the error's class).
const egressProbe = `
import json, os, socket, sys, urllib.request, urllib.error, http.client
a, b, secret = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3][::-1]
out = {}
def get(key, url, proxy=True):
    h = {"http": "http://127.0.0.1:3128"} if proxy else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(h))
    try:
        r = opener.open(url, timeout=10)
        out[key] = "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        out[key] = "%d %s" % (e.code, e.read().decode())
    except Exception as e:
        out[key] = "error " + type(e).__name__ + " " + repr(e)
# The default: urllib reads the proxy variables.
try:
    out["env"] = "%d %s" % (lambda r: (r.status, r.read().decode()))(urllib.request.urlopen("http://allowed.test:%d/" % a, timeout=10))
except Exception as e:
    out["env"] = "error " + repr(e)
# NO_PROXY sends 127.0.0.1 direct; the explicit-proxy attempts below must not.
no_proxy = os.environ.pop("NO_PROXY"), os.environ.pop("no_proxy")
get("allowed_address", "http://127.0.0.1:%d/" % a)
get("b_name", "http://b.test:%d/" % b)
get("b_literal", "http://127.0.0.2:%d/" % b)
get("b_decimal", "http://2130706434:%d/" % b)
get("b_octal", "http://0177.0.0.2:%d/" % b)
get("b_short", "http://127.2:%d/" % b)
get("b_mapped", "http://[::ffff:127.0.0.2]:%d/" % b)
get("a_other_port", "http://allowed.test:%d/" % b)
get("metadata", "http://169.254.169.254/latest/meta-data/")
get("unlisted", "http://unlisted.test/")
for key, host, port in [("direct_a", "127.0.0.1", a), ("direct_b", "127.0.0.2", b)]:
    try:
        socket.create_connection((host, port), timeout=5).close()
        out[key] = "connected"
    except Exception as e:
        out[key] = "error " + type(e).__name__
try:
    socket.getaddrinfo("allowed.test", 80)
    out["dns"] = "resolved"
except Exception as e:
    out["dns"] = "error " + type(e).__name__
c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
c.set_tunnel("b.test", b)
try:
    c.request("GET", "/")
    out["connect_b"] = "%d" % c.getresponse().status
except Exception as e:
    out["connect_b"] = "error " + str(e)
found = [k for k, v in os.environ.items() if secret in v]
for root in ["/workspace", "/tmp", "/etc", "/run", "/proc/self"]:
    for d, _, files in os.walk(root):
        for f in files:
            try:
                with open(os.path.join(d, f), "rb") as fh:
                    if secret.encode() in fh.read(1 << 20):
                        found.append(os.path.join(d, f))
            except Exception:
                pass
out["secret_found"] = found
out["proxy_env"] = os.environ.get("HTTP_PROXY", "") + " " + no_proxy[0]
print(json.dumps(out))
`

// testEgress: the allowed server is reached by name through the proxy
// variables and by its allowed address; every private, loopback,
// metadata and unlisted destination is refused in every notation; there is
// no direct route and no DNS; the secret reaches the allowed server and
// never the sandbox.
func testEgress(t *testing.T, e *env) {
	ee := e.egress
	o := e.run(t, sandbox.ExecRequest{
		Argv:    []string{"python3", "-c", egressProbe, fmt.Sprint(ee.a.port), fmt.Sprint(ee.b.port), reverse(egressSecret)},
		Timeout: 60 * time.Second,
	})
	expectExit(t, "the egress probe", o, 0)
	var got map[string]any
	if err := json.Unmarshal([]byte(o.stdout), &got); err != nil {
		t.Fatalf("probe output: %v\n%s", err, o)
	}
	want := map[string]string{
		"env":             "200 answer from 127.0.0.1",
		"allowed_address": "200 answer from 127.0.0.1",
		"b_name":          "403 airlock egress",
		"b_literal":       "403 airlock egress",
		"b_decimal":       "403 airlock egress",
		"b_octal":         "403 airlock egress",
		"b_short":         "403 airlock egress",
		"b_mapped":        "403 airlock egress",
		"a_other_port":    "403 airlock egress",
		"metadata":        "403 airlock egress",
		"unlisted":        "403 airlock egress",
		"direct_a":        "connected", // forwarded to the proxy: an allowed address

		"direct_b":  "error",
		"dns":       "error",
		"connect_b": "error Tunnel connection failed: 403",
		"proxy_env": "http://127.0.0.1:3128 localhost,127.0.0.1",
	}
	for k, w := range want {
		if g, _ := got[k].(string); !strings.HasPrefix(g, w) {
			t.Errorf("%s: got %q, want %q…", k, g, w)
		}
	}
	if found, _ := got["secret_found"].([]any); len(found) != 0 {
		t.Errorf("the sandbox can read the secret in %v", found)
	}
	if n := ee.b.hits.Load(); n != 0 {
		t.Errorf("the server on 127.0.0.2 (never allowed) got %d requests", n)
	}
	ee.a.mu.Lock()
	auth := append([]string(nil), ee.a.auth...)
	ee.a.mu.Unlock()
	if len(auth) != 2 || auth[0] != egressSecret || auth[1] != "" {
		t.Errorf("the allowed server got Authorization %q, want the secret for allowed.test only", auth)
	}
	rep, ok := e.sb.(egress.Reporter)
	if !ok {
		t.Fatal("the instance does not report egress (egress.Reporter)")
	}
	// The forwarded connection (direct_a) is counted when its tunnel ends,
	// not when the command's connect returns: the agent accepts it at
	// once, then asks the proxy for it over a stream of its own, and the
	// proxy counts it once the command's close has come through. On a
	// loaded machine, and the more so where the host reaches the agent
	// through a Pod's port forward, that can come after the probe has
	// ended: wait for it (10 s, far more than it takes).
	sum, ok := rep.EgressSummary()
	for deadline := time.Now().Add(10 * time.Second); ok && sum.Allowed < 3 && time.Now().Before(deadline); sum, ok = rep.EgressSummary() {
		time.Sleep(20 * time.Millisecond)
	}
	if !ok || sum.Allowed != 3 || sum.Denied < 10 {
		t.Errorf("egress summary %+v (reported %v): want 3 allowed (two requests and a forwarded connection), at least 10 denied", sum, ok)
	}
	l := ee.logs.String()
	if strings.Contains(l, "never-sees-this") {
		t.Error("the secret is in the proxy's log")
	}
	if t.Failed() {
		t.Logf("probe: %s\nlogs:\n%s", o.stdout, l)
	}
}

// reverse hands the probe the secret in a form it can search for without
// the secret itself being in the sandbox (in its argv).
func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// testUnreadDownload: a command that starts a large download through the
// egress proxy and never reads it cannot make its sandbox uncontrollable:
// execs, file calls and signals still answer at once, and once it is
// killed a new exec runs within a second.
func testUnreadDownload(t *testing.T, e *env) {
	p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{Background: true, Argv: []string{"python3", "-c", fmt.Sprintf(`
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", 3128))
s.sendall(b"GET http://127.0.0.1:%d/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n")
open("/tmp/unread-started", "w").close()
time.sleep(600)
`, e.egress.a.port, e.egress.a.port)}})
	if err != nil {
		t.Fatalf("start the download that is never read: %v", err)
	}
	e.waitFile(t, "/tmp/unread-started")
	// Give the proxy time to fill every window it can.
	time.Sleep(2 * time.Second)
	e.controlAnswers(t, p)
}

// testLoopbackClients: an allowed destination on the host's loopback
// (127.0.0.1:PORT, named by an allow-address) is reached by ordinary
// clients that honour NO_PROXY=127.0.0.1 and so connect straight to it (the
// agent forwards that one address through the proxy), while a server the
// command runs on the sandbox's own loopback stays reachable, and the
// host's other loopback ports stay out of reach.
func testLoopbackClients(t *testing.T, e *env) {
	a := e.egress.a.port
	o := e.run(t, sandbox.ExecRequest{Timeout: 60 * time.Second, Argv: []string{"sh", "-c", fmt.Sprintf(`
python3 -m http.server 18080 --bind 127.0.0.1 --directory /tmp >/dev/null 2>&1 &
server=$!
echo inside > /tmp/inside.txt
for i in $(seq 50); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 18080), 1)' 2>/dev/null && break; sleep 0.1; done
echo "python: $(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:%d/", timeout=10).read().decode())' 2>&1)"
echo "python-inside: $(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:18080/inside.txt", timeout=10).read().decode().strip())' 2>&1)"
if command -v curl >/dev/null; then
  echo "curl: $(curl -sS -m 10 http://127.0.0.1:%d/ 2>&1)"
  echo "curl-inside: $(curl -sS -m 10 http://127.0.0.1:18080/inside.txt 2>&1)"
  echo "curl-other: $(curl -s -m 10 -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/ 2>&1)"
fi
if command -v node >/dev/null; then
  echo "node: $(node -e 'fetch("http://127.0.0.1:%d/").then(r => r.text()).then(t => console.log(t), e => console.log("error", e.cause ? e.cause.code : e.message))' 2>&1)"
fi
kill $server
`, a, a, e.egress.b.port, a)}})
	expectExit(t, "the loopback clients", o, 0)
	want := map[string]string{
		"python":        "answer from 127.0.0.1",
		"python-inside": "inside",
		"curl":          "answer from 127.0.0.1",
		"curl-inside":   "inside",
		"curl-other":    "000",
		"node":          "answer from 127.0.0.1",
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[k] = v
		}
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			if k != "python" && k != "python-inside" {
				t.Logf("%s is not in this sandbox's root: not tried", strings.TrimSuffix(strings.TrimSuffix(k, "-inside"), "-other"))
				continue
			}
		}
		if !strings.HasPrefix(g, w) {
			t.Errorf("%s: got %q, want %q", k, g, w)
		}
	}
	if n := e.egress.b.hits.Load(); n != 0 {
		t.Errorf("the host's server on another loopback address got %d requests", n)
	}
}
