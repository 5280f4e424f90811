package agentd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// Suspending host sessions for a pause (gVisor's `runsc checkpoint`): a
// socket bound on the host (runsc --host-uds=create) cannot be saved, so
// before a checkpoint the host sends the agent agent.SuspendSignal, and
// the agent closes its listener and its session, and removes the socket's
// file (which tells the host it is done); the commands run on.
// After a restore (or a checkpoint that failed) agent.ResumeSignal has it
// listen again at the same path, and the host's next session comes in. A
// host that dials meanwhile is refused (ECONNREFUSED), and tries again.

// sessionDir is the directory of the session socket, opened before setup
// bound the commands' root over the path (chrootTarget): a suspend removes
// the socket and a resume binds it again through it.
var sessionDir *os.File

// serveSuspendable serves host sessions from ln, listening on path, as
// serveSessions does, with suspends.
func (s *server) serveSuspendable(ln net.Listener, path string) error {
	if sessionDir != nil {
		path = fmt.Sprintf("/proc/self/fd/%d/%s", sessionDir.Fd(), filepath.Base(path))
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, agent.SuspendSignal, agent.ResumeSignal)
	var mu sync.Mutex
	cur := ln
	failed := make(chan error, 1)
	serve := func(l net.Listener) {
		err := s.acceptSessions(l)
		mu.Lock()
		defer mu.Unlock()
		if l == cur {
			// Not a suspend's close: the listener failed.
			failed <- err
		}
	}
	go serve(ln)
	for {
		select {
		case err := <-failed:
			return err
		case v := <-sig:
			mu.Lock()
			switch {
			case v == agent.SuspendSignal && cur != nil:
				l := cur
				cur = nil
				l.Close()
				s.sessMu.Lock()
				if s.current != nil {
					s.current.Close()
					s.current = nil
				}
				s.sessMu.Unlock()
				// The socket's file going says to the host that the
				// agent let go of it.
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					mu.Unlock()
					return err
				}
			case v == agent.ResumeSignal && cur == nil:
				s.takeIdentity(filepath.Dir(path))
				l, err := listenSessions(path)
				if err != nil {
					mu.Unlock()
					return err
				}
				cur = l
				go serve(l)
			}
			mu.Unlock()
		}
	}
}
