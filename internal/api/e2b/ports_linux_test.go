package e2b

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// wsEcho is a WebSocket echo server on port 8765 (Python's standard
// library only): it answers each text frame with "echo: " and the text.
// Port 8766 streams: "first", then after 3 s "second".
const wsEcho = `
import base64, hashlib, socket, threading, time
def ws(c):
    d = b""
    while b"\r\n\r\n" not in d:
        d += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in d.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    f = c.makefile("rb")
    while True:
        h = f.read(2)
        if len(h) < 2:
            return
        n = h[1] & 127
        if n == 126:
            n = int.from_bytes(f.read(2), "big")
        elif n == 127:
            n = int.from_bytes(f.read(8), "big")
        m = f.read(4) if h[1] & 128 else b"\0\0\0\0"
        p = bytes(x ^ m[i % 4] for i, x in enumerate(f.read(n)))
        if h[0] & 15 == 8:
            c.sendall(b"\x88\x00")
            c.close()
            return
        r = b"echo: " + p
        c.sendall(bytes([0x81, len(r)]) + r)
def slow(c):
    d = b""
    while b"\r\n\r\n" not in d:
        d += c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
    time.sleep(3)
    c.sendall(b"7\r\nsecond\n\r\n0\r\n\r\n")
    c.close()
def serve(port, fn):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=fn, args=(c,), daemon=True).start()
threading.Thread(target=serve, args=(8766, slow), daemon=True).start()
serve(8765, ws)
`

// TestExposedPorts serves a native sandbox's servers through the daemon
// by their names (PORT-ID.DOMAIN in Host) and by E2B's headers: a real
// python3 -m http.server, a WebSocket, a streamed response, a closed
// port's 502, a private sandbox's traffic token, a template that exposes
// nothing, and the audit of each connection.
func TestExposedPorts(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default"}, {Name: "closed", ExposePorts: supervisor.ExposeNone}, {Name: "token", ExposePorts: supervisor.ExposeToken}}}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"), audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg, Audit: al}, func(o *Options) {
		o.Config.Templates = []string{"base=default", "closed=closed", "token=token"}
		o.Domain = "sandbox.localhost:7070"
	})
	ctx := context.Background()
	op := supervisor.Caller{Operator: true}
	start := func(id string, argv ...string) {
		t.Helper()
		if _, err := e.sup.StartProcess(ctx, op, id, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{Argv: argv}}); err != nil {
			t.Fatal(err)
		}
	}
	// get asks the daemon for path with Host host and more headers.
	get := func(host, path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	serving := func(host string, hdr map[string]string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, b := get(host, "/hello.txt", hdr)
			if st == 200 {
				if b != "hello from the sandbox\n" {
					t.Fatalf("GET %s/hello.txt: %q", host, b)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s/hello.txt: %d %s", host, st, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	sb := e.create(e.key, `{"templateID":"base"}`)
	var domain string
	if sb.Domain == nil || *sb.Domain != "sandbox.localhost:7070" {
		t.Fatalf("the create answered domain %v, not the configured one", sb.Domain)
	}
	domain = *sb.Domain
	if _, err := e.sup.Exec(ctx, op, sb.SandboxID, supervisor.ExecRequest{Argv: []string{"sh", "-c", "echo hello from the sandbox > /workspace/hello.txt"}}); err != nil {
		t.Fatal(err)
	}
	start(sb.SandboxID, "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace")
	start(sb.SandboxID, "python3", "-c", wsEcho)
	// What the SDK's getHost(8000) builds, as a browser sends it.
	host := "8000-" + sb.SandboxID + "." + domain
	serving(host, nil)
	serving(strings.ToUpper(host), nil)
	// E2B's headers reach the same server, on the daemon's own name.
	serving("127.0.0.1", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8000"})
	// Another name, or a port that is not one, is the daemon's own API.
	if st, _ := get("8000-"+sb.SandboxID+".example.com", "/hello.txt", nil); st == 200 {
		t.Fatalf("a name outside the domain reached the sandbox")
	}
	if st, _ := get("08000-"+sb.SandboxID+"."+domain, "/hello.txt", nil); st == 200 {
		t.Fatalf("port 08000 reached the sandbox")
	}

	// A closed port: 502, saying so.
	if st, b := get("9-"+sb.SandboxID+"."+domain, "/", nil); st != 502 || !strings.Contains(b, "no process listens on port 9") {
		t.Fatalf("a closed port: %d %q", st, b)
	}
	// An unknown sandbox: 502 too.
	if st, b := get("8000-sb-0123456789ab."+domain, "/", nil); st != 502 || !strings.Contains(b, "no running sandbox") {
		t.Fatalf("an unknown sandbox: %d %q", st, b)
	}

	// A response is passed on as it comes, not when it ends. (Its server
	// may still be starting: wait until it answers at all.)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, _ := get("8766-"+sb.SandboxID+"."+domain, "/", nil); st != 502 || time.Now().After(deadline) {
			break
		}
	}
	func() {
		req, _ := http.NewRequest("GET", e.url+"/", nil)
		req.Host = "8766-" + sb.SandboxID + "." + domain
		began := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		if err != nil || line != "first\n" || time.Since(began) > 2500*time.Millisecond {
			t.Fatalf("the first chunk of a slow response: %q %v after %s", line, err, time.Since(began))
		}
	}()

	// A WebSocket: the upgrade and frames both ways.
	wsRoundTrip(t, e.url, "8765-"+sb.SandboxID+"."+domain, "hi there", "echo: hi there")

	// HTTP/2 without TLS (h2c, as a TLS proxy in front or a gRPC client
	// speaks it) on a listener with ServerProtocols reaches python3's
	// HTTP/1.1-only server.
	func() {
		h2s := httptest.NewUnstartedServer(e.h)
		h2s.Config.Protocols = ServerProtocols()
		h2s.Start()
		defer h2s.Close()
		var h2c http.Protocols
		h2c.SetUnencryptedHTTP2(true)
		cl := &http.Client{Transport: &http.Transport{Protocols: &h2c}}
		req, _ := http.NewRequest("GET", h2s.URL+"/hello.txt", nil)
		req.Host = host
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.ProtoMajor != 2 || res.StatusCode != 200 || string(b) != "hello from the sandbox\n" {
			t.Fatalf("h2c to python3's http.server: %s %d %q", res.Proto, res.StatusCode, b)
		}
	}()

	// A private sandbox: its traffic token, and nothing else, opens it.
	priv := e.create(e.key, `{"templateID":"base","network":{"allowPublicTraffic":false}}`)
	if priv.TrafficAccessToken == "" || priv.TrafficAccessToken == priv.EnvdAccessToken {
		t.Fatalf("a private sandbox's tokens: %+v", priv)
	}
	if _, err := e.sup.Exec(ctx, op, priv.SandboxID, supervisor.ExecRequest{Argv: []string{"sh", "-c", "echo hello from the sandbox > /workspace/hello.txt"}}); err != nil {
		t.Fatal(err)
	}
	start(priv.SandboxID, "python3", "-m", "http.server", "8000", "--directory", "/workspace")
	phost := "8000-" + priv.SandboxID + "." + domain
	serving(phost, map[string]string{"E2b-Traffic-Access-Token": priv.TrafficAccessToken})
	for name, bad := range map[string]string{"no token": "", "the envd token": priv.EnvdAccessToken, "another sandbox's": sb.TrafficAccessToken, "a wrong one": "0123"} {
		if st, b := get(phost, "/hello.txt", map[string]string{"E2b-Traffic-Access-Token": bad}); st != 403 || !strings.Contains(b, "allowPublicTraffic") {
			t.Fatalf("a private sandbox with %s: %d %q", name, st, b)
		}
	}
	// A template that asks every sandbox's traffic token.
	tok := e.create(e.key, `{"templateID":"token"}`)
	start(tok.SandboxID, "python3", "-m", "http.server", "8000", "--directory", "/tmp")
	thost := "8000-" + tok.SandboxID + "." + domain
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, b := get(thost, "/", map[string]string{"E2b-Traffic-Access-Token": tok.TrafficAccessToken})
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expose_ports token, with the token: %d %s", st, b)
		}
	}
	if st, b := get(thost, "/", nil); st != 403 {
		t.Fatalf("expose_ports token, without the token: %d %q", st, b)
	}
	// The traffic token opens the interpreter, still, and not envd.
	if st, _ := e.do("GET", "/health", map[string]string{"E2b-Sandbox-Id": priv.SandboxID, "E2b-Sandbox-Port": envdPort, "X-Access-Token": priv.TrafficAccessToken}, nil); st != 401 {
		t.Fatalf("envd with the traffic token: %d", st)
	}
	if st, _ := e.do("GET", "/health", map[string]string{"E2b-Sandbox-Id": priv.SandboxID, "E2b-Sandbox-Port": envdPort, "X-Access-Token": priv.EnvdAccessToken}, nil); st == 401 {
		t.Fatalf("envd refused a private sandbox's envd token")
	}

	// A template that exposes nothing.
	closed := e.create(e.key, `{"templateID":"closed"}`)
	start(closed.SandboxID, "python3", "-m", "http.server", "8000")
	time.Sleep(500 * time.Millisecond)
	if st, b := get("8000-"+closed.SandboxID+"."+domain, "/", nil); st != 403 || !strings.Contains(b, "does not expose ports") {
		t.Fatalf("a template with expose_ports none: %d %q", st, b)
	}

	// Each connection is audited at its end, with its bytes.
	http.DefaultClient.CloseIdleConnections()
	e.h.closeIdlePorts()
	var evs []audit.Event
	var ok8000, closed9, ws bool
	for deadline := time.Now().Add(5 * time.Second); !(ok8000 && closed9 && ws) && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		page, err := al.Query(ctx, audit.Query{Sandbox: sb.SandboxID, Kinds: []audit.Kind{audit.KindExpose}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		evs = evs[:0]
		for _, raw := range page.Events {
			var ev audit.Event
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
			switch {
			case ev.Port == 8000 && ev.BytesReceived > 0 && ev.BytesSent > 0 && ev.Error == "":
				ok8000 = true
			case ev.Port == 9 && strings.Contains(ev.Error, "no process listens"):
				closed9 = true
			case ev.Port == 8765 && ev.BytesReceived > 0 && strings.HasPrefix(ev.Host, "8765-"):
				ws = true
			}
		}
	}
	if !ok8000 || !closed9 || !ws {
		t.Fatalf("the audit log's expose events: %+v", evs)
	}
}

// wsRoundTrip opens a WebSocket to the daemon at base with Host host,
// sends text in one masked frame, and expects want back.
func wsRoundTrip(t *testing.T, base, host, text, want string) {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 101 || res.Header.Get("Sec-Websocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("the WebSocket upgrade: %s %v %s", res.Status, res.Header, b)
	}
	mask := []byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(text))}
	frame = append(frame, mask...)
	for i := range len(text) {
		frame = append(frame, text[i]^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, head[1]&127)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	if head[0] != 0x81 || string(body) != want {
		t.Fatalf("the WebSocket's answer: %x %q, want %q", head, body, want)
	}
	_, _ = c.Write([]byte{0x88, 0x80, 0, 0, 0, 0})
}
