package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"golang.org/x/sys/unix"
)

// A session is one connection from the host, served until it ends. The
// first comes over the descriptor or the standard streams the agent was
// started with; where the sandbox outlives its host (agent.ContainedConfig
// Listen), later ones come over a unix socket, each through a relay the
// host runs in the sandbox (RelayArg), and each new one closes the one
// before: one host at a time.
type session struct {
	net.Conn
	// ended is set once the connection failed or was closed: from then on
	// nobody hears what is sent over it.
	ended atomic.Bool
}

func (s *session) Read(b []byte) (int, error) {
	n, err := s.Conn.Read(b)
	if err != nil {
		s.ended.Store(true)
	}
	return n, err
}

func (s *session) Write(b []byte) (int, error) {
	n, err := s.Conn.Write(b)
	if err != nil {
		s.ended.Store(true)
	}
	return n, err
}

func (s *session) Close() error {
	s.ended.Store(true)
	return s.Conn.Close()
}

type sessionKey struct{}

// sessionOf returns the session a request came over.
func sessionOf(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey{}).(*session)
	return s
}

// serveSession serves one host connection until it ends, after closing the
// session before it.
func (s *server) serveSession(conn net.Conn) {
	sess := &session{Conn: conn}
	s.sessMu.Lock()
	prev := s.current
	s.current = sess
	s.sessMu.Unlock()
	if prev != nil {
		prev.Close()
	}
	agent.ServeConn(context.WithValue(context.Background(), sessionKey{}, sess), sess, s.mux)
}

// detached says whether an exec of the request with ctx has lost its host
// for good: its session ended, and the sandbox outlives its sessions. Such
// an exec runs on; what it would send is dropped.
func (s *server) detached(ctx context.Context) bool {
	sess := sessionOf(ctx)
	return s.persistent && sess != nil && sess.ended.Load()
}

// listenSessions listens on the unix socket path for later sessions; only
// uid 0 (the relays the host starts) may use it.
func listenSessions(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for host sessions: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen for host sessions: %w", err)
	}
	return ln, nil
}

// acceptSessions serves every connection to ln from uid 0, one after
// another replacing the one before.
func (s *server) acceptSessions(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if uid, err := peerUID(c); err != nil || uid != 0 {
			fmt.Fprintf(os.Stderr, "airlock-agent: refused a session from uid %d: %v\n", uid, err)
			c.Close()
			continue
		}
		go s.serveSession(c)
	}
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}

// relay is the agent binary run as a relay (agent.RelayArg): it joins its
// standard streams to the agent's session socket until either side ends.
func relay(path string) int {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: relay: %v\n", err)
		return 1
	}
	go func() {
		_, _ = io.Copy(c, os.Stdin)
		// The host is gone: the agent's side of the session ends too.
		_ = c.CloseWrite()
	}()
	_, _ = io.Copy(os.Stdout, c)
	return 0
}
