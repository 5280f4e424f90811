package agentd

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestLifetimeDue: the sandbox ends LifetimeGrace after its TTL with no
// host attached, AttachedGrace after it with one; the idle timeout counts
// only with no host attached and no command running.
func TestLifetimeDue(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	running := false
	l := newLifetime(func() bool { return running }, func(string) {})
	l.now = func() time.Time { return t0 }
	l.set(&agent.LifetimeRequest{RemainingMS: 60_000, IdleMS: 10_000, IdleForMS: 4_000})
	defer func() {
		if l.timer != nil {
			l.timer.Stop()
		}
	}()
	at, why := l.due(false)
	if want := t0.Add(6*time.Second + agent.LifetimeGrace); !at.Equal(want) || why == "" {
		t.Fatalf("idle, detached: due %v (%s), want %v", at.Sub(t0), why, want.Sub(t0))
	}
	if at, _ := l.due(true); !at.Equal(t0.Add(time.Minute + agent.LifetimeGrace)) {
		t.Fatalf("a command runs: due %v, want the TTL", at.Sub(t0))
	}
	l.session(+1)
	if at, _ := l.due(false); !at.Equal(t0.Add(time.Minute + agent.AttachedGrace)) {
		t.Fatalf("attached: due %v, want the TTL and the attached grace", at.Sub(t0))
	}
	l.session(-1)
	l.set(&agent.LifetimeRequest{})
	if at, _ := l.due(false); !at.IsZero() {
		t.Fatalf("no lifetime: due %v, want never", at.Sub(t0))
	}
}

// TestLifetimeEnds: with no host attached, the sandbox ends at its TTL
// and the grace; a host that extends the TTL meanwhile moves the end.
func TestLifetimeEnds(t *testing.T) {
	ended := make(chan string, 1)
	l := newLifetime(func() bool { return false }, func(why string) { ended <- why })
	start := time.Now()
	l.set(&agent.LifetimeRequest{RemainingMS: 100})
	l.set(&agent.LifetimeRequest{RemainingMS: 600}) // extended
	select {
	case why := <-ended:
		took := time.Since(start)
		if took < 600*time.Millisecond+agent.LifetimeGrace {
			t.Fatalf("ended after %v (%s): before the extended TTL and its grace", took, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox did not end at its TTL")
	}
}
