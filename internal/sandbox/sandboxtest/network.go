package sandboxtest

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

func networkCases() []testCase {
	return []testCase{
		{name: "none", run: testNetworkNone},
		{name: "none_has_no_proxy", run: testNoProxy},
	}
}

func testNetworkNone(t *testing.T, e *env) {
	t.Run("loopback_only", func(t *testing.T) {
		dev := e.shOK(t, "cat /proc/net/dev")
		var ifaces []string
		for _, line := range strings.Split(dev, "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
		if len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Errorf("interfaces inside: %q, want only lo", ifaces)
		}
	})
	t.Run("host_listener", func(t *testing.T) {
		// A listener on every host address, loopback included: the
		// sandbox's 127.0.0.1 is its own, and no other address is reachable.
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatalf("listen on the host: %v", err)
		}
		defer ln.Close()
		var accepted atomic.Int32
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		targets := []string{"127.0.0.1"}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
					targets = append(targets, ipn.IP.String())
				}
			}
		}
		prog := `
import socket, sys
port = int(sys.argv[1])
for host in sys.argv[2:]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("connected", host)
    except OSError as e:
        print("refused", host, e.errno)
    finally:
        s.close()
`
		o := e.run(t, execArgv(append([]string{"python3", "-c", prog, strconv.Itoa(port)}, targets...)...))
		expectExit(t, "connect to the host", o, 0)
		if strings.Contains(o.stdout, "connected") || !strings.Contains(o.stdout, "refused") {
			t.Errorf("connecting to a listener on the host's %v from inside: %s", targets, o.stdout)
		}
		time.Sleep(50 * time.Millisecond)
		if n := accepted.Load(); n != 0 {
			t.Errorf("the host's listener accepted %d connections from the sandbox", n)
		}
	})
	t.Run("outside", func(t *testing.T) {
		start := time.Now()
		o := e.python(t, `
import socket
try:
    print(socket.getaddrinfo("example.com", 80))
    print("resolved")
except OSError as e:
    print("no dns", e)
for addr in [("1.1.1.1", 53), ("8.8.8.8", 443), ("169.254.169.254", 80)]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr)
        print("connected", addr)
    except OSError as e:
        print("unreachable", addr, e.errno)
    finally:
        s.close()
`)
		expectExit(t, "reach the outside", o, 0)
		if strings.Contains(o.stdout, "resolved") || strings.Contains(o.stdout, "connected") || !strings.Contains(o.stdout, "no dns") {
			t.Errorf("a sandbox without network reached the outside: %s", o.stdout)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("failing to resolve and connect took %v; without a network it should fail at once", d)
		}
	})
}

// testNoProxy: a sandbox without egress has no proxy port, no proxy
// variables and no egress summary.
func testNoProxy(t *testing.T, e *env) {
	out := e.pythonOK(t, `
import os, socket
try:
    socket.create_connection(("127.0.0.1", 3128), timeout=5); print("connected")
except Exception as e:
    print("error", type(e).__name__)
print(repr(os.environ.get("HTTP_PROXY")), repr(os.environ.get("http_proxy")))
`)
	if out != "error ConnectionRefusedError\nNone None\n" {
		t.Errorf("network none: %q, want no proxy listening and no proxy variables", out)
	}
	if rep, ok := e.sb.(egress.Reporter); ok {
		if _, ok := rep.EgressSummary(); ok {
			t.Error("a sandbox without egress reports an egress summary")
		}
	}
}
