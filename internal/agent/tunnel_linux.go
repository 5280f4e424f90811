package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// DialLocal is Dial for an agent on this host's kernel, reached over a
// unix socket (native). With tunnels it offers the agent a tunnel channel
// (see tunnel.go), which the client then uses for the egress tunnels and
// the Dial streams when the agent takes it; either way the session can
// carry exec sockets (execsock.go), which the client uses when the agent
// says it takes them. Without tunnels, or when the agent did not take
// them, the client opens a channel on its first Dial where the agent
// says it can take one later (lazytunnel.go). A c that is not a unix
// socket is only Dial'd.
func DialLocal(ctx context.Context, c net.Conn, tunnels bool) (*Client, []sandbox.Layer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Dial(ctx, c)
	}
	rc := &rightsConn{UnixConn: uc}
	var ch *net.UnixConn
	if tunnels {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("make the tunnel channel: %w", err)
		}
		hostEnd := os.NewFile(uintptr(fds[0]), "tunnels")
		agentEnd := os.NewFile(uintptr(fds[1]), "tunnels")
		fc, err := net.FileConn(hostEnd)
		hostEnd.Close()
		if err != nil {
			agentEnd.Close()
			return nil, nil, fmt.Errorf("make the tunnel channel: %w", err)
		}
		ch = fc.(*net.UnixConn)
		// The offer rides on the session's first byte.
		rc.offer = agentEnd
	}
	cl, layers, err := Dial(ctx, rc)
	if err != nil {
		rc.drop()
		if ch != nil {
			ch.Close()
		}
		return nil, nil, err
	}
	if cl.helloResp.ExecSockets && os.Getenv(EnvExecSockets) != "0" {
		cl.rc = rc
	}
	if ch == nil || !cl.helloResp.Tunnels {
		if ch != nil {
			ch.Close()
		}
		if cl.helloResp.LazyTunnels && os.Getenv(EnvLazyTunnels) != "0" {
			cl.lazy = &lazyTunnels{rc: rc, dialOnly: !tunnels}
		}
		return cl, layers, nil
	}
	cl.tun = newTunnels(ch)
	return cl, layers, nil
}

// rightsConn is the host's end of a session that passes descriptors: the
// tunnel offer rides as SCM_RIGHTS on the session's first byte (an agent
// that does not look for it loses nothing: the kernel closes a descriptor
// nobody receives), and an exec socket on a byte of its own, written
// between HTTP/2's writes, that the agent takes out of the stream
// (execsock.go).
type rightsConn struct {
	*net.UnixConn
	// wmu keeps HTTP/2's writes and the exec sockets' bytes apart.
	wmu   sync.Mutex
	offer *os.File
	mu    sync.Mutex
	// execs are the exec sockets open, closed with the client; closed
	// says it was.
	execs  map[*sockStream]struct{}
	closed bool
}

func (c *rightsConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	if f := c.offer; f != nil && len(p) > 0 {
		c.offer = nil
		_, _, err := c.WriteMsgUnix(p[:1], unix.UnixRights(int(f.Fd())), nil)
		f.Close()
		if err != nil {
			return 0, err
		}
		n, p = 1, p[1:]
		if len(p) == 0 {
			return n, nil
		}
	}
	k, err := c.UnixConn.Write(p)
	return n + k, err
}

// drop closes an offer never sent.
func (c *rightsConn) drop() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.offer != nil {
		c.offer.Close()
		c.offer = nil
	}
}

// passExec sends f, the agent's end of an exec socket, on a byte of its
// own (ExecSocketByte) between HTTP/2's writes.
func (c *rightsConn) passExec(f *os.File) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _, err := c.WriteMsgUnix([]byte{ExecSocketByte}, unix.UnixRights(int(f.Fd())), nil)
	return err
}

// tunnels is the host's end of a tunnel channel.
type tunnels struct {
	ch      *net.UnixConn
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan tunnelReply
	// serve takes the egress connections handed over; nil while no
	// ServeEgress runs, when they wait in pending (a command of a
	// reattached sandbox may connect before the host serves again).
	serve   atomic.Pointer[func(net.Conn)]
	pending []net.Conn
	handed  chan struct{} // a slot per handed egress connection being served
	// dialOnly closes every egress connection handed over: a lazy
	// channel of a sandbox without a network carries dials only.
	dialOnly bool
	done     chan struct{}
	once     sync.Once
}

type tunnelReply struct {
	m TunnelMsg
	c net.Conn
}

func newTunnels(ch *net.UnixConn) *tunnels { return newTunnelsOf(ch, false) }

func newTunnelsOf(ch *net.UnixConn, dialOnly bool) *tunnels {
	t := &tunnels{ch: ch, waiting: map[uint64]chan tunnelReply{}, handed: make(chan struct{}, tunnelsHanded), dialOnly: dialOnly, done: make(chan struct{})}
	go t.read()
	return t
}

func (t *tunnels) close() {
	t.once.Do(func() {
		close(t.done)
		t.ch.Close()
		t.mu.Lock()
		for _, c := range t.pending {
			c.Close()
		}
		t.pending = nil
		t.mu.Unlock()
	})
}

// read dispatches the agent's messages until the channel ends.
func (t *tunnels) read() {
	defer t.close()
	buf := make([]byte, TunnelMsgMax)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, flags, _, err := t.ch.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 && oobn == 0 {
			return
		}
		var c net.Conn
		fds := rights(oob[:oobn])
		if flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 || len(fds) > 1 {
			closeFDs(fds)
			continue
		}
		if len(fds) == 1 {
			if c, err = socketConn(fds[0]); err != nil {
				continue
			}
		}
		var m TunnelMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			closeConn(c)
			continue
		}
		switch m.Kind {
		case TunnelEgress:
			t.egress(c)
		case TunnelDial:
			t.mu.Lock()
			w := t.waiting[m.ID]
			delete(t.waiting, m.ID)
			t.mu.Unlock()
			if w == nil {
				closeConn(c)
				continue
			}
			w <- tunnelReply{m: m, c: c}
		default:
			closeConn(c)
		}
	}
}

// egress serves a connection a command made to the proxy port.
func (t *tunnels) egress(c net.Conn) {
	if c == nil {
		return
	}
	if t.dialOnly {
		c.Close()
		return
	}
	select {
	case t.handed <- struct{}{}:
	default:
		c.Close()
		return
	}
	t.mu.Lock()
	serve := t.serve.Load()
	if serve == nil {
		t.pending = append(t.pending, c)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.start(*serve, c)
}

// start serves c, a handed egress connection, in a goroutine of its own.
func (t *tunnels) start(serve func(net.Conn), c net.Conn) {
	go func() {
		defer func() { <-t.handed }()
		serve(c)
	}()
}

// dial asks the agent for a connection to port on the sandbox's loopback.
func (t *tunnels) dial(ctx context.Context, port int) (net.Conn, error) {
	w := make(chan tunnelReply, 1)
	t.mu.Lock()
	t.next++
	id := t.next
	t.waiting[id] = w
	t.mu.Unlock()
	forget := func() {
		t.mu.Lock()
		delete(t.waiting, id)
		t.mu.Unlock()
	}
	b, _ := json.Marshal(TunnelMsg{Kind: TunnelDial, ID: id, Port: port})
	if _, _, err := t.ch.WriteMsgUnix(b, nil, nil); err != nil {
		forget()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, err)
	}
	select {
	case r := <-w:
		switch {
		case r.m.Code == "not_found":
			closeConn(r.c)
			return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
		case r.c == nil:
			return nil, fmt.Errorf("connect to port %d in the sandbox: agent: %s", port, truncate512(r.m.Error))
		}
		return r.c, nil
	case <-ctx.Done():
		forget()
		// An answer that raced the forget is closed by read, or here.
		select {
		case r := <-w:
			closeConn(r.c)
		default:
		}
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, ctx.Err())
	case <-t.done:
		forget()
		return nil, fmt.Errorf("connect to port %d in the sandbox: the tunnel channel ended", port)
	}
}

// rights returns the descriptors an SCM_RIGHTS message carried.
func rights(oob []byte) []int {
	if len(oob) == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func closeConn(c net.Conn) {
	if c != nil {
		c.Close()
	}
}

// socketConn makes a connection of a descriptor the agent handed over,
// which must be a connected TCP socket (anything else is closed): the
// sandbox's end of a command's connection, or of a port it dialled.
func socketConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "tunnel")
	defer f.Close()
	for _, want := range []struct {
		opt int
		ok  func(int) bool
	}{
		{unix.SO_DOMAIN, func(v int) bool { return v == unix.AF_INET || v == unix.AF_INET6 }},
		{unix.SO_TYPE, func(v int) bool { return v == unix.SOCK_STREAM }},
		{unix.SO_ACCEPTCONN, func(v int) bool { return v == 0 }},
	} {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, want.opt)
		if err != nil || !want.ok(v) {
			return nil, errors.New("agent: the tunnel channel carried a descriptor that is not a connected TCP socket")
		}
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	if _, ok := c.(*net.TCPConn); !ok {
		c.Close()
		return nil, errors.New("agent: the tunnel channel carried a descriptor that is not a TCP connection")
	}
	return c, nil
}

// setServe makes serve take the egress connections handed over, until
// the returned function is called.
func (t *tunnels) setServe(serve func(net.Conn)) func() {
	t.mu.Lock()
	t.serve.Store(&serve)
	pending := t.pending
	t.pending = nil
	t.mu.Unlock()
	for _, c := range pending {
		t.start(serve, c)
	}
	return func() {
		t.mu.Lock()
		t.serve.Store(nil)
		t.mu.Unlock()
	}
}
