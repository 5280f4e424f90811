package agentd

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// unixPair returns both ends of a unix socketpair of type typ.
func unixPair(t *testing.T, typ int) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// recvConn reads one tunnel message on ch and the socket that came with it.
func recvConn(t *testing.T, ch *net.UnixConn) (agent.TunnelMsg, net.Conn) {
	t.Helper()
	buf := make([]byte, agent.TunnelMsgMax)
	oob := make([]byte, unix.CmsgSpace(4))
	ch.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, _, _, err := ch.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	var m agent.TunnelMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		t.Fatal(err)
	}
	if oobn == 0 {
		return m, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v, %v", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights %v, %v", fds, err)
	}
	f := os.NewFile(uintptr(fds[0]), "conn")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m, c
}

// TestTunnelChannel: the agent takes the channel the host sends with the
// session's first byte (and the session's bytes are all still read), hands
// a command's connection over it, and answers a dial with the connection
// it made; a session without a channel leaves the agent with none.
func TestTunnelChannel(t *testing.T) {
	hostSess, agentSess := unixPair(t, unix.SOCK_STREAM)
	hostCh, agentCh := unixPair(t, unix.SOCK_SEQPACKET)
	f, err := agentCh.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	agentCh.Close()
	if _, _, err := hostSess.WriteMsgUnix([]byte("P"), unix.UnixRights(int(f.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := hostSess.Write([]byte("RI * HTTP/2.0")); err != nil {
		t.Fatal(err)
	}
	var tun tunnelChannel
	sess := tun.takeOffer(agentSess)
	if tun.current() == nil {
		t.Fatal("the agent did not take the channel")
	}
	got := make([]byte, 14)
	if _, err := io.ReadFull(sess, got); err != nil || string(got) != "PRI * HTTP/2.0" {
		t.Fatalf("the session reads %q, %v", got, err)
	}

	// A command's connection, handed over.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if !tun.hand(accepted) {
		t.Fatal("the connection was not handed over")
	}
	m, c := recvConn(t, hostCh)
	if m.Kind != agent.TunnelEgress || c == nil {
		t.Fatalf("got %+v, %v", m, c)
	}
	if _, err := cmd.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Fatalf("the host read %q, %v", b, err)
	}

	// A dial of the listening port, and of one nobody listens on.
	port := ln.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		port int
		code string
	}{{port, ""}, {closedPort(t), "not_found"}} {
		req, _ := json.Marshal(agent.TunnelMsg{Kind: agent.TunnelDial, ID: 7, Port: tc.port})
		if _, _, err := hostCh.WriteMsgUnix(req, nil, nil); err != nil {
			t.Fatal(err)
		}
		m, c := recvConn(t, hostCh)
		if m.ID != 7 || m.Code != tc.code || (c != nil) != (tc.code == "") {
			t.Fatalf("dial of %d: %+v, connection %v", tc.port, m, c)
		}
	}

	// A session of a host that offers nothing: no channel.
	plainHost, plain := unixPair(t, unix.SOCK_STREAM)
	if _, err := plainHost.Write([]byte("PRI")); err != nil {
		t.Fatal(err)
	}
	go func() { tun.takeOffer(plain) }()
	deadline := time.Now().Add(5 * time.Second)
	for tun.current() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the channel outlived its session's replacement")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return p
}
