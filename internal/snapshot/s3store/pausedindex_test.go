package s3store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
)

// TestClaimPaused: a claim keeps a second claimer out (ErrClaimed) until
// it is released; one older than its TTL (a daemon that died with it) is
// taken over, by exactly one of several claimers at once; the old
// holder's release leaves the new claim alone.
func TestClaimPaused(t *testing.T) {
	srv := server(t)
	ctx := context.Background()
	a, b := open(t, srv, "p/"), open(t, srv, "p/")
	const id = "sb-0123456789ab"
	rel, err := a.ClaimPaused(ctx, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ClaimPaused(ctx, id, time.Hour); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a second claim: %v", err)
	}
	rel(ctx)
	rel2, err := b.ClaimPaused(ctx, id, time.Hour)
	if err != nil {
		t.Fatalf("a claim after the release: %v", err)
	}
	// b's claim made stale (as a daemon that died two hours ago left
	// it): of five claimers at once exactly one takes it over.
	for round := range 3 {
		key := "p/claims/" + id
		body, err := a.c.GetBytes(ctx, "snaps", key, 64)
		if err != nil {
			t.Fatal(err)
		}
		old := map[string]string{"claimed-at": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)}
		if err := a.c.PutBytes(ctx, "snaps", key, body, "text/plain", old); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []func(context.Context)
		for range 5 {
			wg.Go(func() {
				r, err := open(t, srv, "p/").ClaimPaused(ctx, id, time.Hour)
				if err != nil && !errors.Is(err, ErrClaimed) {
					t.Error(err)
				}
				if err == nil {
					mu.Lock()
					won = append(won, r)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: %d claimers took over the stale claim, want 1", round, len(won))
		}
		// The old holder's release leaves the new claim.
		rel2(ctx)
		if _, err := a.ClaimPaused(ctx, id, time.Hour); !errors.Is(err, ErrClaimed) {
			t.Fatalf("round %d: the old holder's release removed the new claim: %v", round, err)
		}
		rel2 = won[0]
	}
	rel2(ctx)
	var left []string
	if err := a.c.List(ctx, "snaps", "p/claims/", func(o objstore.Object) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("claims left: %v", left)
	}
}

// TestPausedIndex: the index lists a key's paused sandboxes by one
// prefix, and every key's; a key id that is not a plain name is refused.
func TestPausedIndex(t *testing.T) {
	srv := server(t)
	ctx := context.Background()
	st := open(t, srv, "p/")
	for _, p := range [][2]string{{"key-a", "sb-000000000001"}, {"key-a", "sb-000000000002"}, {"key-b", "sb-000000000003"}} {
		if err := st.IndexPaused(ctx, p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	l, err := st.ListPaused(ctx, "key-a", 10)
	if err != nil || len(l) != 2 || l[0].ID != "sb-000000000001" || l[0].Owner != "key-a" {
		t.Fatalf("key-a's: %+v, %v", l, err)
	}
	if l, err := st.ListPaused(ctx, "", 10); err != nil || len(l) != 3 {
		t.Fatalf("every key's: %+v, %v", l, err)
	}
	if l, err := st.ListPaused(ctx, "", 2); err != nil || len(l) != 2 {
		t.Fatalf("every key's, at most 2: %+v, %v", l, err)
	}
	if err := st.UnindexPaused(ctx, "key-a", "sb-000000000001"); err != nil {
		t.Fatal(err)
	}
	if l, err := st.ListPaused(ctx, "key-a", 10); err != nil || len(l) != 1 {
		t.Fatalf("key-a's after a removal: %+v, %v", l, err)
	}
	for _, bad := range []string{"../x", "a/b", ".."} {
		if _, err := st.ListPaused(ctx, bad, 10); err == nil {
			t.Errorf("key %q listed", bad)
		}
	}
}

// TestClaimPausedAs: a claim of a nonce the claimer kept is its own: a
// claim left with that nonce (a process of the daemon that died holding
// it) is taken over at once, however young; another nonce is refused
// until the claim is stale.
func TestClaimPausedAs(t *testing.T) {
	srv := server(t)
	ctx := context.Background()
	a, b := open(t, srv, "p/"), open(t, srv, "p/")
	const id = "sb-0123456789ac"
	if _, err := a.ClaimPausedAs(ctx, id, "nonce-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	// The process that held it died: its release never ran.
	if _, err := b.ClaimPausedAs(ctx, id, "nonce-b", time.Hour); !errors.Is(err, ErrClaimed) {
		t.Fatalf("another nonce's claim: %v", err)
	}
	rel, err := b.ClaimPausedAs(ctx, id, "nonce-a", time.Hour)
	if err != nil {
		t.Fatalf("the same nonce's claim, left by a process that died: %v", err)
	}
	if _, err := a.ClaimPaused(ctx, id, time.Hour); !errors.Is(err, ErrClaimed) {
		t.Fatalf("a claim while the taken-over claim is held: %v", err)
	}
	rel(ctx)
	if _, err := a.ClaimPausedAs(ctx, id, "", time.Hour); err == nil {
		t.Error("a claim without a nonce was taken")
	}
	var left []string
	if err := a.c.List(ctx, "snaps", "p/claims/", func(o objstore.Object) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("claims left: %v", left)
	}
}
