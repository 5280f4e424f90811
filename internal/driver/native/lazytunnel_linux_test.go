package native

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// lazyServers serves, in the sandbox, /big (lazyBig bytes of a pattern)
// and anything else ("small") on 127.0.0.1:8001, and a WebSocket echo
// ("echo: " and the text of each frame) on 8765.
const lazyServers = `
import base64, hashlib, http.server, socket, threading
big = bytes(i * 7 % 251 for i in range(3 * 1024 * 1024 + 17))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = big if self.path == "/big" else b"small"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
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
        m = f.read(4)
        p = bytes(x ^ m[i % 4] for i, x in enumerate(f.read(h[1] & 127)))
        r = b"echo: " + p
        c.sendall(bytes([0x81, len(r)]) + r)
def wsserve():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 8765))
    s.listen()
    while True:
        c, _ = s.accept()
        threading.Thread(target=ws, args=(c,), daemon=True).start()
threading.Thread(target=wsserve, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", 8001), H).serve_forever()
`

const lazyBig = 3*1024*1024 + 17

// TestLazyTunnelPorts: a sandbox without a network (two host descriptors
// idle, decision 62) reaches its ports through a tunnel channel opened on
// the first Dial (decision 87): the connections are the sandbox's sockets
// handed over, a download arrives whole and a WebSocket echoes while the
// agent holds the channel; when the last connection closes the host's
// descriptors and the agent's sockets return to their idle counts; Dials
// racing that close all connect.
func TestLazyTunnelPorts(t *testing.T) {
	requireNative(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	in := drivertest.Sandbox(t, d, sandbox.Spec{}, func(*testing.T, string) {})
	if _, err := in.Start(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", lazyServers}, Background: true}); err != nil {
		t.Fatal(err)
	}
	pd := in.(sandbox.PortDialer)
	pid := in.(*agentdriver.Instance).Host().(*host).agentPid
	dial := func(port int) net.Conn {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c, err := pd.DialPort(t.Context(), port)
			if err == nil {
				if nc, ok := c.(interface{ NetConn() net.Conn }); !ok {
					t.Fatalf("port %d: the connection is a %T, not one handed over on a tunnel channel", port, c)
				} else if _, ok := nc.NetConn().(*net.TCPConn); !ok {
					t.Fatalf("port %d: the connection is a %T, not a TCP socket", port, nc.NetConn())
				}
				return c
			}
			if !errors.Is(err, sandbox.ErrPortClosed) || time.Now().After(deadline) {
				t.Fatalf("dial port %d: %v", port, err)
			}
		}
	}
	// Wait for both servers, then take the idle counts.
	dial(8001).Close()
	dial(8765).Close()
	idleHost, idleAgent := -1, -1
	settle := func() {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			h, a := openFDs(t), seqpacketsOf(t, pid)
			if idleHost < 0 {
				idleHost, idleAgent = h, a
			}
			if h == idleHost && a == idleAgent {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the last connection: %d host descriptors (idle %d), the agent's SOCK_SEQPACKET sockets %d (idle %d)", h, idleHost, a, idleAgent)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	settle()

	web := dial(8001)
	ws := dial(8765)
	if h, a := openFDs(t), seqpacketsOf(t, pid); h != idleHost+3 || a != idleAgent+1 {
		t.Errorf("two connections open: %d host descriptors, want %d (the channel and the two sockets); the agent's SOCK_SEQPACKET sockets %d, want %d (the channel)", h, idleHost+3, a, idleAgent+1)
	}
	if err := getBig(web); err != nil {
		t.Fatal(err)
	}
	if err := wsEcho(ws, "hi through the channel"); err != nil {
		t.Fatal(err)
	}
	web.Close()
	if err := wsEcho(ws, "again"); err != nil {
		t.Fatalf("the WebSocket after the other connection closed: %v", err)
	}
	ws.Close()
	settle()

	// Dials racing the close of the channel by the last connection.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for range 25 {
				c, err := pd.DialPort(t.Context(), 8001)
				if err != nil {
					errs <- err
					return
				}
				err = getSmall(c)
				c.Close()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	settle()
}

func getBig(c net.Conn) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: sandbox\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	want := make([]byte, lazyBig)
	for i := range want {
		want[i] = byte(i * 7 % 251)
	}
	if res.StatusCode != 200 || !bytes.Equal(b, want) {
		return fmt.Errorf("GET /big: %d, %d bytes, equal %v", res.StatusCode, len(b), bytes.Equal(b, want))
	}
	return nil
}

func getSmall(c net.Conn) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: sandbox\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(res.Body)
	if err == nil && string(b) != "small" {
		err = fmt.Errorf("GET /small: %q", b)
	}
	return err
}

// wsEcho upgrades c to a WebSocket (the first call), sends text and
// checks the echo.
func wsEcho(c net.Conn, text string) error {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	if text != "again" {
		k := make([]byte, 16)
		rand.Read(k)
		key := base64.StdEncoding.EncodeToString(k)
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: sandbox\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key); err != nil {
			return err
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		if res.StatusCode != 101 || res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
			return fmt.Errorf("the upgrade: %d %v", res.StatusCode, res.Header)
		}
	}
	mask := []byte{1, 2, 3, 4}
	frame := append([]byte{0x81, 0x80 | byte(len(text))}, mask...)
	for i := range len(text) {
		frame = append(frame, text[i]^mask[i%4])
	}
	if _, err := c.Write(frame); err != nil {
		return err
	}
	want := "echo: " + text
	got := make([]byte, 2+len(want))
	if _, err := io.ReadFull(br, got); err != nil {
		return err
	}
	if got[0] != 0x81 || string(got[2:]) != want {
		return fmt.Errorf("the echo: %q", got)
	}
	return nil
}
