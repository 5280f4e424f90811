package native

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
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

func TestEgressSandbox(t *testing.T) {
	requireNative(t)
	const secret = "Bearer sandbox-never-sees-this-7f3a"
	a, b := startEgressServer(t, "127.0.0.1"), startEgressServer(t, "127.0.0.2")
	var logs bytes.Buffer
	var logMu sync.Mutex
	proxy := egress.New(egress.Options{
		Logger:   slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil)),
		Resolver: nameResolver{"allowed.test": "127.0.0.1", "b.test": "127.0.0.2", "unlisted.test": "127.0.0.1"},
		Secrets:  []egress.Secret{{Host: "allowed.test", Header: "Authorization", Value: secret}},
	})
	d, err := New(Options{Egress: proxy})
	if err != nil {
		t.Fatal(err)
	}
	in, err := d.Create(t.Context(), sandbox.Spec{Network: sandbox.Network{
		Mode:           sandbox.NetworkEgress,
		AllowHosts:     []string{fmt.Sprintf("allowed.test:%d", a.port), fmt.Sprintf("b.test:%d", b.port)},
		AllowAddresses: []string{fmt.Sprintf("127.0.0.1:%d", a.port)},
	}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer in.Close(context.Background())
	var stdout, stderr bytes.Buffer
	res, err := in.Exec(t.Context(), sandbox.ExecRequest{
		Argv:   []string{"python3", "-c", egressProbe, fmt.Sprint(a.port), fmt.Sprint(b.port), reverse(secret)},
		Stdout: &stdout, Stderr: &stderr, Timeout: 60 * time.Second,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v %+v\n%s", err, res, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("probe output %q: %v", stdout.String(), err)
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
		"direct_a":        "error ConnectionRefusedError",
		"direct_b":        "error",
		"dns":             "error",
		"connect_b":       "error Tunnel connection failed: 403",
		"proxy_env":       "http://127.0.0.1:3128 localhost,127.0.0.1",
	}
	for k, w := range want {
		if g, _ := got[k].(string); !strings.HasPrefix(g, w) {
			t.Errorf("%s: got %q, want %q…", k, g, w)
		}
	}
	if found, _ := got["secret_found"].([]any); len(found) != 0 {
		t.Errorf("the sandbox can read the secret in %v", found)
	}
	if n := b.hits.Load(); n != 0 {
		t.Errorf("the server on 127.0.0.2 (never allowed) got %d requests", n)
	}
	a.mu.Lock()
	auth := append([]string(nil), a.auth...)
	a.mu.Unlock()
	if len(auth) != 2 || auth[0] != secret || auth[1] != "" {
		t.Errorf("the allowed server got Authorization %q, want the secret for allowed.test only", auth)
	}
	rep, ok := in.(egress.Reporter)
	if !ok {
		t.Fatal("the instance does not report egress")
	}
	sum, ok := rep.EgressSummary()
	if !ok || sum.Allowed != 2 || sum.Denied < 10 {
		t.Errorf("summary %+v", sum)
	}
	logMu.Lock()
	l := logs.String()
	logMu.Unlock()
	if strings.Contains(l, "never-sees-this") {
		t.Error("the secret is in the proxy's log")
	}
	if t.Failed() {
		t.Logf("probe: %s\nlogs:\n%s", stdout.String(), l)
	}
}

// TestNetworkNoneHasNoProxy checks that a sandbox without egress has no
// proxy port and no proxy variables.
func TestNetworkNoneHasNoProxy(t *testing.T) {
	requireNative(t)
	in, err := newDriver(t).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	var out bytes.Buffer
	res, err := in.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", `
import os, socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5); print("connected")
except Exception as e:
    print("error", type(e).__name__)
print(repr(os.environ.get("HTTP_PROXY")), repr(os.environ.get("http_proxy")))
`}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %v %+v", err, res)
	}
	if got := out.String(); got != "error ConnectionRefusedError\nNone None\n" {
		t.Fatalf("network none: %q", got)
	}
	if _, ok := in.(egress.Reporter).EgressSummary(); ok {
		t.Fatal("network none reports an egress summary")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
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
