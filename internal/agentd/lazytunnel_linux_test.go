package agentd

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// lazySession serves an agent's session in this process (its Hello, its
// Dial streams, its session reader with the exec sockets and tunnel
// channels that ride on it) and returns the host's client of it, made as
// native makes a sandbox without a network's. lazy is what the agent says
// in Hello: false is an agent of before lazy channels.
func lazySession(t *testing.T, lazy bool) (*server, *agent.Client) {
	t.Helper()
	hostEnd, agentEnd := unixPair(t, unix.SOCK_STREAM)
	s := &server{}
	mux := http.NewServeMux()
	mux.Handle(agent.ProcHello, connect.NewUnaryHandlerSimple(agent.ProcHello, func(context.Context, *agent.HelloRequest) (*agent.HelloResponse, error) {
		return &agent.HelloResponse{Version: agent.Version, ExecSockets: s.execSockets.Load(), LazyTunnels: lazy && s.execSockets.Load()}, nil
	}, agent.HandlerOptions()...))
	mux.Handle(agent.ProcDial, http.HandlerFunc(serveDial))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { agent.ServeConn(ctx, s.session(agentEnd), mux) }()
	cl, _, err := agent.DialLocal(ctx, hostEnd, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); cancel() })
	return s, cl
}

// echoServer listens on the loopback and echoes each connection.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// echoes writes msg on c and reads it back.
func echoes(c net.Conn, msg string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// fdCount counts the process's sockets (the runtime opens other
// descriptors of its own as it goes).
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// settles waits until the process holds want sockets and the
// agent's channel is as open says.
func settles(t *testing.T, s *server, want int, open bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fdCount(t) != want || (s.tun.current() != nil) != open {
		if time.Now().After(deadline) {
			var links []string
			ents, _ := os.ReadDir("/proc/self/fd")
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				links = append(links, l)
			}
			t.Fatalf("%d descriptors (want %d), the agent's channel open %v (want %v): %v", fdCount(t), want, s.tun.current() != nil, open, links)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLazyTunnel: a session that began without a tunnel channel gets one
// on its first Dial (the connection is the sandbox's socket, handed
// over), keeps it while a dialled connection is open, and loses it when
// the last one closes: the descriptors return to their idle count. The
// next Dial opens another.
func TestLazyTunnel(t *testing.T) {
	port := echoServer(t)
	s, cl := lazySession(t, true)
	idle := fdCount(t)
	if s.tun.current() != nil {
		t.Fatal("the agent has a channel before any Dial")
	}
	for round := range 2 {
		a, err := cl.DialPort(t.Context(), port)
		if err != nil {
			t.Fatal(err)
		}
		nc, ok := a.(interface{ NetConn() net.Conn })
		if !ok {
			t.Fatalf("round %d: the Dial is a %T, not a connection handed over", round, a)
		}
		if _, ok := nc.NetConn().(*net.TCPConn); !ok {
			t.Fatalf("round %d: the connection is a %T, not a TCP socket", round, nc.NetConn())
		}
		b, err := cl.DialPort(t.Context(), port)
		if err != nil {
			t.Fatal(err)
		}
		if s.tun.current() == nil {
			t.Fatalf("round %d: the agent holds no channel while two connections are open", round)
		}
		for _, c := range []net.Conn{a, b} {
			if err := echoes(c, "hello"); err != nil {
				t.Fatal(err)
			}
		}
		a.Close()
		if err := echoes(b, "still"); err != nil {
			t.Fatalf("round %d: the second connection after the first closed: %v", round, err)
		}
		if s.tun.current() == nil {
			t.Fatalf("round %d: the channel closed with a connection still open", round)
		}
		b.Close()
		// Only the channel and the connections were added: after the last
		// closes, the host's end and the agent's are gone.
		settles(t, s, idle, false)
	}
	if _, err := cl.DialPort(t.Context(), closedPort(t)); err == nil {
		t.Fatal("a closed port dialled")
	}
	settles(t, s, idle, false)
}

// TestLazyTunnelRace: Dials racing the close of the channel by the last
// connection to end (the host's close and the agent's drop of the old
// channel, its take of the new one) all succeed, and the descriptors end
// at their idle count.
func TestLazyTunnelRace(t *testing.T) {
	port := echoServer(t)
	s, cl := lazySession(t, true)
	idle := fdCount(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				c, err := cl.DialPort(t.Context(), port)
				if err != nil {
					errs <- err
					return
				}
				if _, ok := c.(interface{ NetConn() net.Conn }); !ok {
					errs <- io.ErrUnexpectedEOF
				}
				err = echoes(c, "x")
				c.Close()
				if err != nil {
					errs <- err
					return
				}
				if (g+i)%3 == 0 {
					time.Sleep(time.Duration(i%5) * 100 * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	settles(t, s, idle, false)
}

// TestLazyTunnelOldAgent: an agent that does not say LazyTunnels (one of
// before them) is passed no channel; its Dials go by streams as before.
func TestLazyTunnelOldAgent(t *testing.T) {
	port := echoServer(t)
	s, cl := lazySession(t, false)
	c, err := cl.DialPort(t.Context(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(interface{ NetConn() net.Conn }); ok {
		t.Fatal("an old agent's Dial was handed over")
	}
	if err := echoes(c, "over a stream"); err != nil {
		t.Fatal(err)
	}
	if s.tun.current() != nil {
		t.Fatal("an old agent was passed a channel")
	}
}
