package e2b

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// spliceServer serves on 127.0.0.1:8001, HTTP/1.1 with keep-alive: /big,
// spliceBig bytes of a pattern; /drop, a small answer after which it
// closes the connection without saying so (as a server whose keep-alive
// timed out); /slow, an answer after 3 s; anything else, "small".
const spliceServer = `
import http.server, time
big = bytes(i * 7 % 251 for i in range(3 * 1024 * 1024 + 17))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(big) if self.path == "/big" else len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)
    def do_HEAD(self):
        self.answer(b"")
    def do_GET(self):
        if self.path == "/big":
            self.answer(big)
        elif self.path == "/slow":
            time.sleep(3)
            self.answer(b"late")
        elif self.path == "/drop":
            self.answer(b"dropped")
            self.close_connection = True
        else:
            self.answer(b"small")
http.server.ThreadingHTTPServer(("127.0.0.1", 8001), H).serve_forever()
`

const spliceBig = 3*1024*1024 + 17

// TestExposedPortsSpliced: a GET through an exposed port of a native
// sandbox with a network (its connections handed over as the host's
// sockets) takes the spliced path: the body arrives whole, a HEAD has none,
// the client's connection stays routed request by request (a closed port
// on the same connection answers 502), a pooled connection the server
// closed is replaced, a client that goes away ends the wait for the
// server, and the bytes the summary and the audit count are
// the bytes that moved.
func TestExposedPortsSpliced(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default",
		Network: supervisor.TemplateNetwork{Mode: "egress", AllowHosts: []string{"nothing.invalid"}}}}}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"), audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg, Audit: al}, func(o *Options) {
		o.Domain = "sandbox.localhost:7070"
	})
	ctx := context.Background()
	op := supervisor.Caller{Operator: true}
	sb := e.create(e.key, `{"templateID":"base"}`)
	if _, err := e.sup.StartProcess(ctx, op, sb.SandboxID, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{Argv: []string{"python3", "-c", spliceServer}}}); err != nil {
		t.Fatal(err)
	}
	host := "8001-" + sb.SandboxID + ".sandbox.localhost:7070"
	// One client connection for every request.
	cl := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DisableCompression: true}}
	defer cl.CloseIdleConnections()
	do := func(method, host, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, e.url+path, nil)
		req.Host = host
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s%s: %v", method, host, path, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s %s%s: the body: %v", method, host, path, err)
		}
		return res, b
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, _ := do("GET", host, "/small"); res.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server in the sandbox never answered")
		}
	}
	want := make([]byte, spliceBig)
	for i := range want {
		want[i] = byte(i * 7 % 251)
	}
	for i := range 2 {
		res, b := do("GET", host, "/big")
		if res.StatusCode != 200 || res.ContentLength != spliceBig || !bytes.Equal(b, want) {
			t.Fatalf("GET /big (%d): %d, length %d, %d bytes, equal %v", i, res.StatusCode, res.ContentLength, len(b), bytes.Equal(b, want))
		}
	}
	if res, b := do("HEAD", host, "/big"); res.StatusCode != 200 || res.Header.Get("Content-Length") != strconv.Itoa(spliceBig) || len(b) != 0 {
		t.Fatalf("HEAD /big: %d, Content-Length %q, %d bytes", res.StatusCode, res.Header.Get("Content-Length"), len(b))
	}
	// The same client connection, another port: routed by its own Host.
	if res, b := do("GET", "9-"+sb.SandboxID+".sandbox.localhost:7070", "/"); res.StatusCode != 502 || !strings.Contains(string(b), "no process listens on port 9") {
		t.Fatalf("a closed port on the same connection: %d %q", res.StatusCode, b)
	}
	// The server closes the pooled connection after /drop: the next
	// request goes on a new one.
	for i := range 3 {
		if res, b := do("GET", host, "/drop"); res.StatusCode != 200 || string(b) != "dropped" {
			t.Fatalf("GET /drop (%d): %d %q", i, res.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
		if res, b := do("GET", host, "/small"); res.StatusCode != 200 || string(b) != "small" {
			t.Fatalf("GET /small after /drop (%d): %d %q", i, res.StatusCode, b)
		}
	}

	// A client that gives up before the server answers ends the wait:
	// the connection to the sandbox is closed (and audited) then, not
	// when the server answers.
	exposeEvents := func() int {
		t.Helper()
		page, err := al.Query(ctx, audit.Query{Sandbox: sb.SandboxID, Kinds: []audit.Kind{audit.KindExpose}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Events)
	}
	before := exposeEvents()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	req, _ := http.NewRequestWithContext(cctx, "GET", e.url+"/slow", nil)
	req.Host = host
	if res, err := cl.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("GET /slow within 200 ms: %d", res.StatusCode)
	}
	cancel()
	for gaveUp := time.Now(); exposeEvents() == before; time.Sleep(20 * time.Millisecond) {
		if time.Since(gaveUp) > 1500*time.Millisecond {
			t.Fatal("the connection of a request whose client went away was still open 1.5 s later")
		}
	}

	// The summary counts the bodies (and the headers) that moved; once
	// every connection is closed, the audit log's expose events count the
	// same bytes.
	sum, err := e.sup.Egress(ctx, op, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var received, sent int64
	for _, p := range sum.Exposed {
		if p.Port == 8001 {
			received, sent = p.BytesReceived, p.BytesSent
		}
	}
	if received < 2*spliceBig || received > 2*spliceBig+64<<10 || sent == 0 {
		t.Fatalf("the summary of port 8001: received %d, sent %d; want 2×%d and the headers", received, sent, spliceBig)
	}
	e.h.closeIdlePorts()
	var audited int64
	for deadline := time.Now().Add(5 * time.Second); audited != received && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		page, err := al.Query(ctx, audit.Query{Sandbox: sb.SandboxID, Kinds: []audit.Kind{audit.KindExpose}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		audited = 0
		for _, raw := range page.Events {
			var ev audit.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Port == 8001 {
				audited += ev.BytesReceived
			}
		}
	}
	if audited != received {
		t.Fatalf("the audit log's expose events of port 8001 received %d bytes; the summary %d", audited, received)
	}
}
