package supervisor

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// tellLifetime tells l's sandbox, where its holder ends it by itself
// (sandbox.LifetimeSetter), its time to live and idle timeout as l's
// record has them: at create, on a claim, on every change of the TTL and
// on reattach. The daemon ends the sandbox itself as before; the holder's
// end is for when no daemon is attached (docs/decisions.md, 51). A pooled
// sandbox has no TTL yet: its holder keeps the driver's lifetime.
func (s *Supervisor) tellLifetime(ctx context.Context, l *live) {
	l.mu.Lock()
	inst, rec := l.inst, l.rec
	l.mu.Unlock()
	ls, ok := inst.(sandbox.LifetimeSetter)
	if !ok || rec.State != store.StateRunning {
		return
	}
	now := s.opts.Now()
	var left time.Duration
	if !rec.ExpiresAt.IsZero() {
		left = max(rec.ExpiresAt.Sub(now), time.Millisecond) + pauseGrace(rec)
	}
	idleFor := max(now.Sub(time.Unix(0, l.lastActive.Load())), 0)
	if err := ls.SetLifetime(ctx, left, rec.IdleTimeout, idleFor); err != nil {
		s.log.Warn("tell the sandbox's holder its lifetime", "sandbox_id", rec.ID, "err", err)
	}
}

// endedByHolder is the end reason of rec, whose holder was found gone on
// start, when its lifetime had run out by then: its holder ended it ("ttl"
// or "idle"), as it does with no daemon attached. Empty otherwise.
func endedByHolder(rec store.Sandbox, last, now time.Time) (string, string) {
	switch {
	case rec.State != store.StateRunning:
		return "", ""
	case !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt):
		return "ttl", "its time to live ran out while no daemon ran; what held it ended it"
	case rec.IdleTimeout > 0 && !last.IsZero() && now.Sub(last) > rec.IdleTimeout:
		return "idle", "it was unused for its idle timeout while no daemon ran; what held it ended it"
	}
	return "", ""
}
