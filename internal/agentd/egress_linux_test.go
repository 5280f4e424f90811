package agentd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"golang.org/x/sys/unix"
)

// tunnelPair serves the Egress procedure on one end of a socketpair (the
// agent's side, listening on a free loopback port) and returns the host's
// agent.Client on the other, and the address commands would connect to.
func tunnelPair(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agentEnd, hostEnd := conn(fds[0]), conn(fds[1])
	e, err := startEgress(&agent.EgressConfig{Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	e.register(mux)
	ctx, cancel := context.WithCancel(context.Background())
	mux.Handle(agent.ProcHello, connect.NewUnaryHandlerSimple(agent.ProcHello, func(context.Context, *agent.HelloRequest) (*agent.HelloResponse, error) {
		return &agent.HelloResponse{Version: agent.Version}, nil
	}, agent.HandlerOptions()...))
	go agent.ServeConn(ctx, agentEnd, mux)
	cl, _, err := agent.Dial(ctx, hostEnd)
	if err != nil {
		t.Fatal(err)
	}
	go cl.ServeEgress(ctx, serve)
	t.Cleanup(func() { cancel(); cl.Close(); agentEnd.Close(); e.close() })
	return e.lns[0].Addr().String()
}

// TestEgressTunnel carries connections both ways through the tunnel,
// half-closes included.
func TestEgressTunnel(t *testing.T) {
	addr := tunnelPair(t, func(c net.Conn) {
		// An echo server that upper-cases nothing: it returns what it got
		// once the client half-closes, then closes.
		defer c.Close()
		b, _ := io.ReadAll(c)
		c.Write(b)
	})
	for i := range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte{byte(i)}, 1<<20+i)
		go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("conn %d: got %d bytes, %v; want %d", i, len(got), err, len(msg))
		}
	}
}

// TestEgressWithoutListener checks that a sandbox without egress refuses
// the procedure.
func TestEgressWithoutListener(t *testing.T) {
	var e *egressServer
	req := httptest.NewRequest(http.MethodPost, agent.ProcEgress, bytes.NewReader(make([]byte, agent.EgressPrefixLen)))
	req.Header.Set("Content-Type", agent.EgressContentType)
	w := httptest.NewRecorder()
	e.ServeHTTP(w, req)
	want := agent.EgressEnd(connect.CodeFailedPrecondition, errors.New("this sandbox has no egress"))
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), want) {
		t.Fatalf("serve without a listener: %d %q, want 200 %q", w.Code, w.Body.Bytes(), want)
	}
}

func BenchmarkEgressTunnel(b *testing.B) {
	const size = 64 << 20
	addr := tunnelPair(b, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 256<<10)
		for n := 0; n < size; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	b.SetBytes(size)
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		if n != size {
			b.Fatalf("got %d bytes", n)
		}
	}
}

// TestEgressReadDeadline checks that a read deadline on the host's side
// of a tunnel ends a read that nothing answers.
func TestEgressReadDeadline(t *testing.T) {
	got := make(chan error, 1)
	addr := tunnelPair(t, func(c net.Conn) {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		got <- err
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past the deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the read")
	}
}
