package egress

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
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
