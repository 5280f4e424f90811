package agentd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The sandbox's own end of its lifetime (agent.LifetimeRequest): a sandbox
// that outlives its host sessions ends itself once its time to live (or,
// with nothing running, its idle timeout) has run out while no host
// session is attached, so that it never outlives its TTL whether or not
// its daemon comes back. An attached host enforces the lifetime itself;
// the agent's is a backstop, agent.AttachedGrace late.

// lifetime is the sandbox's lifetime as the host last set it.
type lifetime struct {
	mu       sync.Mutex
	deadline time.Time     // zero: no time to live
	idle     time.Duration // zero: no idle timeout
	active   time.Time     // when the host last used the sandbox
	attached int           // host sessions being served
	timer    *time.Timer
	// running says whether a command runs (which keeps an idle sandbox).
	running func() bool
	// end ends the sandbox, saying why; it does not return.
	end func(why string)
	// now is the clock (a test's).
	now func() time.Time
}

// idleRecheck is how often an idle sandbox whose commands still run looks
// again whether they have ended.
const idleRecheck = 30 * time.Second

func newLifetime(running func() bool, end func(string)) *lifetime {
	return &lifetime{running: running, end: end, now: time.Now, active: time.Now()}
}

// set takes the lifetime the host sent.
func (l *lifetime) set(req *agent.LifetimeRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.deadline = time.Time{}
	if req.RemainingMS > 0 {
		l.deadline = now.Add(time.Duration(req.RemainingMS) * time.Millisecond)
	}
	l.idle = max(time.Duration(req.IdleMS)*time.Millisecond, 0)
	l.active = now.Add(-max(time.Duration(req.IdleForMS)*time.Millisecond, 0))
	l.arm(now)
}

// touch records a use by the host.
func (l *lifetime) touch() {
	l.mu.Lock()
	l.active = l.now()
	l.mu.Unlock()
}

// session counts a host session in (+1) or out (-1).
func (l *lifetime) session(delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attached += delta
	l.arm(l.now())
}

// due is when the sandbox ends and why; zero when it does not. Called
// with l.mu held.
func (l *lifetime) due(running bool) (time.Time, string) {
	var at time.Time
	why := ""
	if !l.deadline.IsZero() {
		at, why = l.deadline, "its time to live ran out"
	}
	if l.idle > 0 && l.attached == 0 && !running {
		if t := l.active.Add(l.idle); at.IsZero() || t.Before(at) {
			at, why = t, "it was unused for its idle timeout"
		}
	}
	switch {
	case at.IsZero():
		return at, ""
	case l.attached > 0:
		return at.Add(agent.AttachedGrace), why + " and its host, attached, did not end it"
	default:
		return at.Add(agent.LifetimeGrace), why + " with no host attached"
	}
}

// arm sets the timer to the next moment the lifetime must be looked at.
// Called with l.mu held.
func (l *lifetime) arm(now time.Time) {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	running := l.idle > 0 && l.attached == 0 && l.running != nil && l.running()
	at, _ := l.due(running)
	if running {
		// The idle timeout waits for the commands: look again later.
		if next := now.Add(idleRecheck); at.IsZero() || next.Before(at) {
			at = next
		}
	}
	if at.IsZero() {
		return
	}
	l.timer = time.AfterFunc(max(at.Sub(now), 0), l.fire)
}

// fire ends the sandbox if its lifetime has run out, or arms again.
func (l *lifetime) fire() {
	l.mu.Lock()
	now := l.now()
	running := l.idle > 0 && l.attached == 0 && l.running != nil && l.running()
	at, why := l.due(running)
	if at.IsZero() || now.Before(at) {
		l.arm(now)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(why)
}

// setLifetime serves agent.ProcLifetime.
func (s *server) setLifetime(_ context.Context, req *agent.LifetimeRequest) (*agent.Empty, error) {
	s.life.set(req)
	return &agent.Empty{}, nil
}

// registerLifetime serves agent.ProcLifetime on mux, and makes every
// other call count as a use of the sandbox.
func (s *server) registerLifetime(mux *http.ServeMux) http.Handler {
	mux.Handle(agent.ProcLifetime, s.lazily(func() http.Handler {
		return connect.NewUnaryHandlerSimple(agent.ProcLifetime, s.setLifetime, agent.HandlerOptions()...)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != agent.ProcLifetime {
			s.life.touch()
		}
		mux.ServeHTTP(w, r)
	})
}

// running says whether a command of the sandbox runs.
func (e *engine) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.procs) > 0
}

// endSandbox ends the sandbox from inside, as its lifetime ran out: every
// command's processes are killed and their groups removed, and the agent
// exits, which (as PID 1 of the sandbox) ends what is left and with it
// the sandbox's mounts; its runtime, where one holds it, ends with it.
func (s *server) endSandbox(why string) {
	fmt.Fprintf(os.Stderr, "airlock-agent: ending the sandbox: %s\n", why)
	s.eng.mu.Lock()
	procs := make([]*proc, 0, len(s.eng.procs))
	for _, p := range s.eng.procs {
		procs = append(procs, p)
	}
	s.eng.mu.Unlock()
	for _, p := range procs {
		s.eng.kill(p, sandbox.ReasonKilled)
		if p.group != nil {
			_ = p.group.Remove()
		}
	}
	if s.eng.workload != nil {
		_ = s.eng.workload.Kill(5 * time.Second)
	}
	os.Exit(0)
}
