package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// lazyTunnels is the host's side of lazy tunnel channels (lazytunnel.go):
// the channel open, if any, and how many dials and connections hold it.
type lazyTunnels struct {
	rc *rightsConn
	// dialOnly: the sandbox has no network, so the agent has no command's
	// connection to hand over on the channel; one it sends is closed.
	dialOnly bool
	mu       sync.Mutex
	// cur is the channel open; nil while no dialled connection is.
	cur *tunnels
	// held counts the dials in flight on cur and the connections they
	// made that are still open; the last to end closes cur.
	held   int
	closed bool
}

// dial connects to port through the channel, opening it first when none
// is open. The connection holds the channel until it is closed.
func (l *lazyTunnels) dial(ctx context.Context, port int) (net.Conn, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, net.ErrClosed)
	}
	if l.cur != nil && l.cur.ended() {
		// The agent ended it (a new session replaced it): its holders
		// keep their connections; the next dial takes a new channel.
		l.cur, l.held = nil, 0
	}
	if l.cur == nil {
		t, err := l.open()
		if err != nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("connect to port %d in the sandbox: open the tunnel channel: %w", port, err)
		}
		l.cur = t
	}
	t := l.cur
	l.held++
	l.mu.Unlock()
	c, err := t.dial(ctx, port)
	if err != nil {
		l.release(t)
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		l.release(t)
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, errors.ErrUnsupported)
	}
	return &lazyConn{TCPConn: tc, release: func() { l.release(t) }}, nil
}

// open makes a channel and passes the agent its end on the session.
func (l *lazyTunnels) open() (*tunnels, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "tunnels")
	agentEnd := os.NewFile(uintptr(fds[1]), "tunnels")
	defer agentEnd.Close()
	fc, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		return nil, err
	}
	ch := fc.(*net.UnixConn)
	// The first frame says what the socket is; the agent reads it before
	// anything the channel carries.
	if _, err := ch.Write([]byte{ExecFrameTunnel}); err != nil {
		ch.Close()
		return nil, err
	}
	if err := l.rc.passExec(agentEnd); err != nil {
		ch.Close()
		return nil, err
	}
	return newTunnelsOf(ch, l.dialOnly), nil
}

// release ends one hold on t; the last closes it, unless it was replaced.
func (l *lazyTunnels) release(t *tunnels) {
	l.mu.Lock()
	last := false
	if l.cur == t {
		l.held--
		if l.held == 0 {
			l.cur, last = nil, true
		}
	}
	l.mu.Unlock()
	if last {
		t.close()
	}
}

// close closes the channel open and opens no more (the client closed).
func (l *lazyTunnels) close() {
	l.mu.Lock()
	t := l.cur
	l.cur, l.closed = nil, true
	l.mu.Unlock()
	if t != nil {
		t.close()
	}
}

// ended says the channel ended (either side closed it).
func (t *tunnels) ended() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// lazyConn is a connection dialled on a lazy channel, which it holds open
// until it is closed. NetConn reaches the socket, so that a splice can.
type lazyConn struct {
	*net.TCPConn
	once    sync.Once
	release func()
}

func (c *lazyConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn returns the sandbox's socket (as tls.Conn's NetConn does).
func (c *lazyConn) NetConn() net.Conn { return c.TCPConn }
