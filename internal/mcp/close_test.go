package mcp_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// slowKill is a fake backend whose Kill takes a while, as a daemon's DELETE
// does.
type slowKill struct {
	*fakeBackend
	delay time.Duration
}

func (s *slowKill) Kill(ctx context.Context, id string) error {
	time.Sleep(s.delay)
	return s.fakeBackend.Kill(ctx, id)
}

// TestCloseWaitsForEndingSessions: a session that ended just before Close
// is still destroying its sandbox; Close waits for that, so that the
// process (airlock mcp) does not exit with the sandbox alive.
func TestCloseWaitsForEndingSessions(t *testing.T) {
	b := &slowKill{fakeBackend: newFake(), delay: 300 * time.Millisecond}
	srv := newServer(t, b)
	cs := connect(t, srv)
	_, _, sc := call(t, cs, "run_code", map[string]any{"code": "print(1)"})
	id, _ := sc["sandbox_id"].(string)
	_ = cs.Close()
	time.Sleep(100 * time.Millisecond) // the session's end is noticed and its sandbox's destroy begins
	srv.Close(context.Background())
	if !slices.Contains(b.killedIDs(), id) {
		t.Fatalf("Close returned while the ended session's sandbox %s was still being destroyed (killed: %v)", id, b.killedIDs())
	}
}
