package agentd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// Host sessions of a sandbox that outlives its host (agent.Config.Listen,
// agent.ContainedConfig.Listen).
//
// The agent listens on a unix socket that only root can reach and serves
// one host session at a time: a new one closes the one before, and the end
// of one ends nothing else (execs run on, their output kept: see
// execs_linux.go). The sandbox lives until the host kills it. This is what
// lets a daemon restart, be upgraded or be killed without losing its
// sandboxes: the agent is its own holder, so no process is added per
// sandbox (docs/decisions.md).
//
// Where the socket is: native, a root-only directory of the host's, the
// listening descriptor passed by the host; gVisor, a root-only directory of
// the host's bound into the sandbox (runsc --host-uds=create), where the
// agent binds it; a container engine's, the agent's own root-only home
// inside the container, reached through a relay the host runs there with
// `docker exec` (RelayArg), the first session being the attach stream.

// listenEarly, for native, starts listening on the socket the host bound
// (agent.ListenArg) as the agent's first act, so that a host connecting
// meanwhile waits in the backlog instead of being refused, and so that the
// credentials it reads from the session are the agent's own (SO_PEERCRED
// names whoever called listen).
func listenEarly() error {
	if err := unix.Listen(agent.FDConn, 16); err != nil {
		return fmt.Errorf("listen for host sessions: %w", err)
	}
	return nil
}

// sessionListener returns the listener of host sessions: the descriptor
// the host bound (native), or a socket the agent binds at the path
// (gVisor).
func sessionListener(cfg *agent.ListenConfig) (net.Listener, error) {
	if cfg.Path != "" {
		ln, err := listenSessions(cfg.Path)
		if err == nil {
			// Kept for a suspend: setup hides the path (suspend_linux.go).
			sessionDir, err = os.Open(filepath.Dir(cfg.Path))
			if err != nil {
				ln.Close()
				return nil, fmt.Errorf("open the session directory: %w", err)
			}
		}
		return ln, err
	}
	f := os.NewFile(uintptr(cfg.FD), "sessions")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen for host sessions: %w", err)
	}
	return ln, nil
}

// listenSessions listens on the unix socket path, root's alone.
func listenSessions(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen for host sessions at %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen for host sessions: %w", err)
	}
	return ln, nil
}

// serveSessions serves host sessions from ln, one at a time, until ln
// fails; it never returns otherwise. A session must come from outside the
// sandbox (its peer has no pid in the sandbox's pid namespace) or from
// root inside it (a relay the host started); the workload is neither.
func (s *server) serveSessions(ln net.Listener) error {
	// The host's end of a session may die at any time (kill -9 of the
	// daemon): a write to it must fail, not kill the agent. Go's runtime
	// turns SIGPIPE into EPIPE for every descriptor but 1 and 2, so only
	// an agent whose standard output and error are the runtime's pipes
	// (a container's) asks for it with Notify (not Ignore: an ignored
	// SIGPIPE would be inherited by every command). Notify costs two
	// threads for the agent's life (os/signal's, and the runtime's
	// signal-mask thread); a native agent's 1 and 2 are /dev/null by now
	// (quiet), and it has no pipe a SIGPIPE could come from.
	if s.cfg.Listen == nil {
		signal.Notify(make(chan os.Signal, 1), unix.SIGPIPE)
	}
	if s.cfg.Listen != nil && s.cfg.Listen.Path != "" {
		return s.serveSuspendable(ln, s.cfg.Listen.Path)
	}
	return s.acceptSessions(ln)
}

// acceptSessions serves host sessions from ln until ln fails.
func (s *server) acceptSessions(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept a host session: %w", err)
		}
		if cred, err := peerCred(c); err != nil || cred.Pid != 0 && cred.Uid != 0 {
			c.Close()
			continue
		}
		go s.serveSession(c)
	}
}

// serveSession serves one host connection until it ends, after closing
// the session before it: one host at a time; the commands run on.
func (s *server) serveSession(conn net.Conn) {
	s.sessMu.Lock()
	prev := s.current
	s.current = conn
	s.sessMu.Unlock()
	if prev != nil {
		prev.Close()
	}
	s.life.session(+1)
	defer s.life.session(-1)
	agent.ServeConn(context.Background(), s.session(conn), s.mux)
}

// quiet points standard output and error at /dev/null.
func quiet() error { return toNull(1, 2) }

// toNull points the descriptors fds, which are open, at /dev/null.
func toNull(fds ...int) error {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer null.Close()
	for _, fd := range fds {
		if err := unix.Dup3(int(null.Fd()), fd, 0); err != nil {
			return fmt.Errorf("point descriptor %d at %s: %w", fd, os.DevNull, err)
		}
	}
	return nil
}

// peerCred is who is at the other end of c, as this sandbox's pid and user
// namespaces see it: pid 0 for a process outside the sandbox.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
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
