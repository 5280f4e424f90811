package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// tunnelChannel is the agent's end of the current session's tunnel
// channel (agent/tunnel.go): where it hands the host the connections it
// would otherwise carry in HTTP/2 streams. Nil while the session offered
// none.
type tunnelChannel struct {
	mu sync.Mutex
	ch *net.UnixConn
}

func (t *tunnelChannel) current() *net.UnixConn {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ch
}

// set makes ch the channel, closing the one before.
func (t *tunnelChannel) set(ch *net.UnixConn) {
	t.mu.Lock()
	prev := t.ch
	t.ch = ch
	t.mu.Unlock()
	if prev != nil && prev != ch {
		prev.Close()
	}
	if ch != nil {
		go t.serve(ch)
	}
}

// drop forgets ch if it is still the channel (it ended).
func (t *tunnelChannel) drop(ch *net.UnixConn) {
	t.mu.Lock()
	if t.ch == ch {
		t.ch = nil
	}
	t.mu.Unlock()
	ch.Close()
}

// hand gives the host c, a command's connection to the proxy port, and
// closes the agent's copy; false when there is no channel or it failed
// (c is then the caller's still).
func (t *tunnelChannel) hand(c net.Conn) bool {
	ch := t.current()
	if ch == nil {
		return false
	}
	if err := sendConn(ch, agent.TunnelMsg{Kind: agent.TunnelEgress}, c); err != nil {
		return false
	}
	c.Close()
	return true
}

// serve answers the host's dial requests on ch until it ends.
func (t *tunnelChannel) serve(ch *net.UnixConn) {
	defer t.drop(ch)
	buf := make([]byte, agent.TunnelMsgMax)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := ch.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		closeRights(oob[:oobn]) // the host sends none
		var m agent.TunnelMsg
		if json.Unmarshal(buf[:n], &m) != nil || m.Kind != agent.TunnelDial {
			continue
		}
		go dialFor(ch, m)
	}
}

// dialFor connects to the port the host asked for and hands it the
// connection, or says why not.
func dialFor(ch *net.UnixConn, m agent.TunnelMsg) {
	reply := agent.TunnelMsg{Kind: agent.TunnelDial, ID: m.ID}
	if m.Port < 1 || m.Port > 65535 {
		reply.Code, reply.Error = "invalid_argument", "dial: the port is not 1 to 65535"
		_ = sendConn(ch, reply, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dialLoopback(ctx, m.Port)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			reply.Code = "not_found"
		}
		reply.Error = err.Error()
		_ = sendConn(ch, reply, nil)
		return
	}
	defer c.Close()
	_ = sendConn(ch, reply, c)
}

// sendConn sends m on ch, with c's socket when c is not nil.
func sendConn(ch *net.UnixConn, m agent.TunnelMsg, c net.Conn) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if c == nil {
		_, _, err = ch.WriteMsgUnix(b, nil, nil)
		return err
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = ch.WriteMsgUnix(b, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// closeRights closes any descriptor an SCM_RIGHTS message carried.
func closeRights(oob []byte) {
	if len(oob) == 0 {
		return
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := unix.ParseUnixRights(&m); err == nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
}

// takeOffer reads the first bytes of a host session, with the tunnel
// channel the host may have sent on the first (agent.DialLocal), and makes
// it the channel; a session without one leaves the agent with none. It
// returns the session with those bytes in front.
func (t *tunnelChannel) takeOffer(conn net.Conn) net.Conn {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		t.set(nil)
		return conn
	}
	buf := make([]byte, 64)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	var ch *net.UnixConn
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil && flags&unix.MSG_CTRUNC == 0 {
		var fds []int
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
		if len(fds) == 1 {
			ch = channelOf(fds[0])
		} else {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	} else {
		closeRights(oob[:oobn])
	}
	t.set(ch)
	return &replayConn{Conn: conn, pre: buf[:n], err: err}
}

// channelOf makes a tunnel channel of fd, a unix SOCK_SEQPACKET socket;
// anything else is closed.
func channelOf(fd int) *net.UnixConn {
	f := os.NewFile(uintptr(fd), "tunnels")
	defer f.Close()
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || v != unix.SOCK_SEQPACKET {
		return nil
	}
	if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil || v != unix.AF_UNIX {
		return nil
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil
	}
	return uc
}

// replayConn is a connection whose first bytes were read already.
type replayConn struct {
	net.Conn
	pre []byte
	err error
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}
