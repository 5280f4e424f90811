package supervisor

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestEndedByHolder: a sandbox found gone on start whose TTL or idle
// timeout had run out was ended by its holder, and says so; one found gone
// before is lost.
func TestEndedByHolder(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	run := store.Sandbox{State: store.StateRunning, ExpiresAt: now.Add(time.Minute), IdleTimeout: 10 * time.Second}
	expired := run
	expired.ExpiresAt = now.Add(-time.Second)
	pooled := expired
	pooled.State = store.StatePooled
	for _, c := range []struct {
		name string
		rec  store.Sandbox
		last time.Time
		want string
	}{
		{"ttl", expired, now, "ttl"},
		{"idle", run, now.Add(-11 * time.Second), "idle"},
		{"neither", run, now.Add(-time.Second), ""},
		{"pooled", pooled, now, ""},
	} {
		if got, why := endedByHolder(c.rec, c.last, now); got != c.want || (got != "") != (why != "") {
			t.Errorf("%s: %q (%s), want %q", c.name, got, why, c.want)
		}
	}
}
