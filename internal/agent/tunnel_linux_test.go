package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// tunnelPair returns the host's tunnels and the agent's end of their
// channel.
func tunnelPair(t *testing.T) (*tunnels, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "tunnels")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	tun := newTunnels(conn(fds[0]))
	agentEnd := conn(fds[1])
	t.Cleanup(func() { tun.close(); agentEnd.Close() })
	return tun, agentEnd
}

// send sends m from the agent's end, with fds.
func send(t *testing.T, ch *net.UnixConn, m TunnelMsg, fds ...int) {
	t.Helper()
	b, _ := json.Marshal(m)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := ch.WriteMsgUnix(b, oob, nil); err != nil {
		t.Fatal(err)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

func fdOf(t *testing.T, c interface {
	File() (*os.File, error)
}) int {
	t.Helper()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// TestTunnelEgress: a connection the agent hands over is served as the
// sandbox's; what is not a connected TCP socket, or comes with others,
// is closed and never served.
func TestTunnelEgress(t *testing.T) {
	tun, agentEnd := tunnelPair(t)
	served := make(chan net.Conn, 4)
	defer tun.setServe(func(c net.Conn) { served <- c })()

	// Not sockets, or not one: a pipe, a listening socket, two at once.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	send(t, agentEnd, TunnelMsg{Kind: TunnelEgress}, int(r.Fd()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	send(t, agentEnd, TunnelMsg{Kind: TunnelEgress}, fdOf(t, ln.(*net.TCPListener)))
	a1, _ := tcpPair(t)
	a2, _ := tcpPair(t)
	send(t, agentEnd, TunnelMsg{Kind: TunnelEgress}, fdOf(t, a1), fdOf(t, a2))

	// A connection: served, and it is the command's.
	cmd, sb := tcpPair(t)
	send(t, agentEnd, TunnelMsg{Kind: TunnelEgress}, fdOf(t, sb))
	select {
	case c := <-served:
		defer c.Close()
		if _, ok := c.(*net.TCPConn); !ok {
			t.Fatalf("served a %T", c)
		}
		if _, err := cmd.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			t.Fatalf("read %q, %v", b, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handed connection was not served")
	}
	select {
	case c := <-served:
		t.Fatalf("served %v as well", c.LocalAddr())
	case <-time.After(100 * time.Millisecond):
	}
}

// TestTunnelDial: a dial is answered with the agent's connection, or
// with its reason; an answer to nobody's request is dropped.
func TestTunnelDial(t *testing.T) {
	tun, agentEnd := tunnelPair(t)
	go func() {
		buf := make([]byte, TunnelMsgMax)
		for {
			n, _, _, _, err := agentEnd.ReadMsgUnix(buf, nil)
			if err != nil {
				return
			}
			var m TunnelMsg
			if json.Unmarshal(buf[:n], &m) != nil {
				return
			}
			reply := TunnelMsg{Kind: TunnelDial, ID: m.ID}
			switch m.Port {
			case 1:
				reply.Code, reply.Error = "not_found", "nothing listens"
				b, _ := json.Marshal(reply)
				_, _, _ = agentEnd.WriteMsgUnix(b, nil, nil)
			case 3:
				// Never answered.
			default:
				_, sb := tcpPair(t)
				f, _ := sb.File()
				stray, _ := json.Marshal(TunnelMsg{Kind: TunnelDial, ID: 999})
				_, _, _ = agentEnd.WriteMsgUnix(stray, unix.UnixRights(int(f.Fd())), nil)
				b, _ := json.Marshal(reply)
				_, _, _ = agentEnd.WriteMsgUnix(b, unix.UnixRights(int(f.Fd())), nil)
				f.Close()
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tun.dial(ctx, 2)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	if _, err := tun.dial(ctx, 1); !errors.Is(err, sandbox.ErrPortClosed) {
		t.Fatalf("dial of a closed port: %v, want ErrPortClosed", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel2()
	if _, err := tun.dial(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial never answered: %v, want the context's end", err)
	}
	tun.mu.Lock()
	left := len(tun.waiting)
	tun.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d dials still waiting", left)
	}
}

// TestTunnelDialOnly: a lazy channel of a sandbox without a network
// carries dials only; a connection the agent hands over on it as a
// command's is closed, neither served nor kept.
func TestTunnelDialOnly(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "tunnels")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	tun := newTunnelsOf(conn(fds[0]), true)
	agentEnd := conn(fds[1])
	defer func() { tun.close(); agentEnd.Close() }()
	served := make(chan net.Conn, 1)
	defer tun.setServe(func(c net.Conn) { served <- c })()
	_, sb := tcpPair(t)
	send(t, agentEnd, TunnelMsg{Kind: TunnelEgress}, fdOf(t, sb))
	// A dial after it is answered: the egress message was read by then.
	go func() {
		buf := make([]byte, TunnelMsgMax)
		n, _, _, _, err := agentEnd.ReadMsgUnix(buf, nil)
		if err != nil {
			return
		}
		var m TunnelMsg
		_ = json.Unmarshal(buf[:n], &m)
		_, c := tcpPair(t)
		send(t, agentEnd, TunnelMsg{Kind: TunnelDial, ID: m.ID}, fdOf(t, c))
	}()
	c, err := tun.dial(t.Context(), 80)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case c := <-served:
		t.Fatalf("served %v", c.LocalAddr())
	default:
	}
	tun.mu.Lock()
	pending := len(tun.pending)
	tun.mu.Unlock()
	if pending != 0 || len(tun.handed) != 0 {
		t.Fatalf("%d connections pending, %d slots taken", pending, len(tun.handed))
	}
}
