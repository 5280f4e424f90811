package agentd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// guestPort serves a virtual machine's host sessions on its port, one
// after the other: a session suspended for a save of the machine
// (agent.ProcSuspend) is followed by the session of the host that resumed
// it (see agent/suspend.go). A session that ends otherwise (its host
// went away) ends the agent, as before.
type guestPort struct {
	port net.Conn
	ctl  *os.File      // the guest init's control socket
	ctlR *bufio.Reader // its answers
	wmu  sync.Mutex    // keeps the sessions' writes apart

	mu        sync.Mutex
	cur       *agent.SessionConn
	suspended bool
	next      chan *agent.SessionConn
}

func newGuestPort(port net.Conn, ctlFD int) *guestPort {
	ctl := os.NewFile(uintptr(ctlFD), "guest-control")
	return &guestPort{port: port, ctl: ctl, ctlR: bufio.NewReader(ctl), next: make(chan *agent.SessionConn, 1)}
}

// serve serves host sessions until one ends that was not suspended.
func (g *guestPort) serve(mux http.Handler) {
	sess := agent.NewSession(g.port, &g.wmu)
	g.mu.Lock()
	g.cur = sess
	g.mu.Unlock()
	for {
		agent.ServeConn(context.Background(), sess, mux)
		g.mu.Lock()
		again := g.suspended || g.cur != sess
		g.mu.Unlock()
		if !again {
			return
		}
		sess = <-g.next
	}
}

// suspend stops the current session and waits, beside, for the resume
// line of token.
func (g *guestPort) suspend(token string) error {
	if len(token) < 16 || strings.ContainsAny(token, " \n") {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("a suspend's token is 16 characters or more, without spaces"))
	}
	g.mu.Lock()
	if g.suspended {
		g.mu.Unlock()
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("the session is suspended already"))
	}
	g.suspended = true
	cur := g.cur
	g.mu.Unlock()
	cur.Stop()
	go g.await(cur, token)
	return nil
}

// await reads the port for the resume line of token, makes the guest
// take on its refresh, ends the old session and starts the next.
func (g *guestPort) await(old *agent.SessionConn, token string) {
	var ref *agent.GuestRefresh
	for {
		var err error
		if ref, err = agent.ReadResume(g.port, token, 2*time.Millisecond); err == nil {
			break
		}
		fmt.Fprintf(os.Stderr, "airlock-agent: wait for the host's resume: %v\n", err)
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.refresh(ref); err != nil {
		// The session goes on: the host sees the guest's clock.
		fmt.Fprintf(os.Stderr, "airlock-agent: refresh the resumed guest: %v\n", err)
	}
	old.End()
	sess := agent.NewSession(g.port, &g.wmu)
	g.wmu.Lock()
	_, err := g.port.Write([]byte(agent.ResumedLine + token + "\n"))
	g.wmu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: answer the host's resume: %v\n", err)
	}
	g.mu.Lock()
	g.cur, g.suspended = sess, false
	g.mu.Unlock()
	g.next <- sess
}

// refresh makes the resumed guest take on ref: its host name here (the
// agent's UTS namespace is the sandbox's), the rest through the init.
func (g *guestPort) refresh(ref *agent.GuestRefresh) error {
	if ref.Hostname != "" {
		if err := unix.Sethostname([]byte(ref.Hostname)); err != nil {
			return fmt.Errorf("set the host name: %w", err)
		}
	}
	b, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	if _, err := g.ctl.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("tell the guest's init: %w", err)
	}
	line, err := g.ctlR.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the guest init's answer: %w", err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return errors.New(line)
	}
	return nil
}

// suspendSession is agent.ProcSuspend: only a machine's agent has a port
// to suspend.
func (s *server) suspendSession(_ context.Context, req *agent.SuspendRequest) (*agent.Empty, error) {
	if s.port == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("only a virtual machine's agent suspends its session"))
	}
	if err := s.port.suspend(req.Token); err != nil {
		return nil, err
	}
	return &agent.Empty{}, nil
}
