package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// tunnelGets sends n GETs of /big through a CONNECT tunnel to the
// fixture's allowed server, the last with Connection: close, ends its
// and reads the tunnel to its end. It returns the bytes it sent and
// received through the tunnel.
func tunnelGets(t *testing.T, f *fixture, n int) (sent, recv int64) {
	t.Helper()
	target := fmt.Sprintf("allowed.test:%d", f.a.addr.Port())
	resp, body, c, br := f.connect(t, target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s %q", resp.Status, body)
	}
	var req strings.Builder
	for i := range n {
		conn := ""
		if i == n-1 {
			conn = "Connection: close\r\n"
		}
		fmt.Fprintf(&req, "GET /big HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, conn)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	// Not a half-close: Go's server stops answering pipelined requests
	// once it reads the end of its client.
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.Copy(io.Discard, br)
	if err != nil {
		t.Fatalf("read the tunnel: %v (after %d bytes)", err, got)
	}
	c.Close()
	return int64(req.Len()), got
}

// TestTunnelCounts: a tunnel's bytes, moved by splice between two TCP
// connections, are counted exactly, each way, in the summary; more than
// one splice round (spliceChunk) of them.
func TestTunnelCounts(t *testing.T) {
	f := newFixture(t, Limits{}, nil, nil)
	sent, recv := tunnelGets(t, f, 5)
	if recv < 5<<20 {
		t.Fatalf("received %d bytes through the tunnel, want 5 MiB and headers", recv)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sum := f.sb.Summary()
		if sum.BytesSent == sent && sum.BytesReceived == recv {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary counts %d sent, %d received; the tunnel moved %d and %d", sum.BytesSent, sum.BytesReceived, sent, recv)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTunnelByteBudget: the byte budget ends a tunnel whose bytes splice
// moves at the budget, not a round later: a budget far below one round
// (spliceChunk), and one of a few rounds and a part, which splice spends
// and copies finish.
func TestTunnelByteBudget(t *testing.T) {
	for _, budget := range []int64{100 << 10, 3*spliceChunk + 300<<10} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) { testTunnelByteBudget(t, budget) })
	}
}

func testTunnelByteBudget(t *testing.T, budget int64) {
	f := newFixture(t, Limits{MaxBytes: budget}, nil, nil)
	_, recv := tunnelGets(t, f, 5)
	if recv > budget || recv < budget-(64<<10) {
		t.Fatalf("received %d bytes through the tunnel with a budget of %d", recv, budget)
	}
	if used := f.sb.bytesUsed(); used > budget {
		t.Fatalf("%d bytes used, budget %d", used, budget)
	}
	resp, body, _, _ := f.connect(t, fmt.Sprintf("allowed.test:%d", f.a.addr.Port()))
	if resp.StatusCode != 403 || !strings.Contains(body, "byte-budget") {
		t.Fatalf("CONNECT after the budget: %s %q, want 403 byte-budget", resp.Status, body)
	}
}

// TestSplicedBody: a plain-HTTP answer's body, moved by splice, arrives
// whole and exactly (an upstream that sends more than its length cannot
// put an answer of its own on the client's connection), twice on one
// client connection, and is counted.
func TestSplicedBody(t *testing.T) {
	const size = 300 << 10
	body := strings.Repeat("a", size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Kept: yes\r\n\r\n%sHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nevil!", size, body)
			}()
		}
	}()
	addr := ln.Addr().String()
	f := newFixture(t, Limits{}, nil, func(n *sandbox.Network, _, _ *server) {
		n.AllowAddresses = append(n.AllowAddresses, addr)
	})
	// Two requests on one raw connection: the second answer must be
	// upstream's answer to it, not the bytes past the first's length.
	c, err := net.Dial("tcp", f.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != body || resp.Header.Get("X-Kept") != "yes" {
			t.Fatalf("answer %d: %d bytes %.20q (%v), header %q; want %d bytes of a", i, len(got), got, err, resp.Header.Get("X-Kept"), size)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.sb.Summary().BytesReceived < 2*size {
		if time.Now().After(deadline) {
			t.Fatalf("received %d bytes counted, want at least %d", f.sb.Summary().BytesReceived, 2*size)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
