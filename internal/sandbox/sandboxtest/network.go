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
		{name: "none", alone: true, run: testNetworkNone},
		{name: "none_loopback_only", needs: []need{needShell}, run: testLoopbackOnly},
		{name: "none_has_no_proxy", run: testNoProxy},
		{name: "exposed_port", run: testExposedPort},
	}
}

// testLoopbackOnly: a sandbox without network has no interface but lo.
func testLoopbackOnly(t *testing.T, e *env) {
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
}

// connectLines checks the output of Workload.Connect for addrs: one line
// each, in order, none of them "connected"; it returns each line's class.
func connectLines(t *testing.T, o output, addrs []string) []string {
	t.Helper()
	expectExit(t, "connect", o, 0)
	lines := strings.Split(strings.TrimSuffix(o.stdout, "\n"), "\n")
	if len(lines) != len(addrs) {
		t.Fatalf("connecting to %d addresses printed %d lines: %s", len(addrs), len(lines), o)
	}
	classes := make([]string, len(lines))
	for i, addr := range addrs {
		line := lines[i]
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "connected":
			t.Errorf("a sandbox without network connected to %s: %s", addr, line)
		case len(f) >= 3 && f[0] == "failed" && f[1] == addr:
			classes[i] = f[2]
		default:
			t.Errorf("connecting to %s printed %q, which is neither connected nor failed", addr, line)
		}
	}
	return classes
}

func testNetworkNone(t *testing.T, e *env) {
	t.Run("host_listener", func(t *testing.T) {
		// A listener on every host address, loopback included: the
		// sandbox's 127.0.0.1 is its own, and no other address is reachable.
		ln, err := net.Listen("tcp4", "0.0.0.0:0") //nolint:gosec // every host address, on purpose: none may be reachable
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
		port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		targets := []string{"127.0.0.1:" + port}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
					targets = append(targets, ipn.IP.String()+":"+port)
				}
			}
		}
		connectLines(t, e.run(t, e.w.Connect(targets...)), targets)
		time.Sleep(50 * time.Millisecond)
		if n := accepted.Load(); n != 0 {
			t.Errorf("the host's listener accepted %d connections from the sandbox", n)
		}
	})
	t.Run("outside", func(t *testing.T) {
		start := time.Now()
		targets := []string{"example.com:80", "1.1.1.1:53", "8.8.8.8:443", "169.254.169.254:80"}
		if class := connectLines(t, e.run(t, e.w.Connect(targets...)), targets); class[0] != "dns" {
			t.Errorf("a sandbox without network resolved example.com (connecting to it failed with %q, want dns)", class[0])
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("failing to resolve and connect took %v; without a network it should fail at once", d)
		}
	})
}

// testNoProxy: a sandbox without egress has no proxy port, no proxy
// variables and no egress summary.
func testNoProxy(t *testing.T, e *env) {
	proxy := []string{"127.0.0.1:3128"}
	// connectLines fails the case if the connection succeeded. Where the
	// sandbox has a network stack (a Linux userland), nothing listening
	// means refused; a sandbox without sockets (Wasm) fails earlier.
	if class := connectLines(t, e.run(t, e.w.Connect(proxy...)), proxy); e.caps.Shell && class[0] != "refused" {
		t.Errorf("network none: connecting to 127.0.0.1:3128 failed with %q, want refused: no proxy listens", class[0])
	}
	for _, kv := range envLines(t, e, nil) {
		if strings.HasPrefix(kv, "HTTP_PROXY=") || strings.HasPrefix(kv, "http_proxy=") {
			t.Errorf("network none: the environment holds %s, want no proxy variables", kv)
		}
	}
	if rep, ok := e.sb.(egress.Reporter); ok {
		if _, ok := rep.EgressSummary(); ok {
			t.Error("a sandbox without egress reports an egress summary")
		}
	}
}
