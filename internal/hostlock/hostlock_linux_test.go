package hostlock

import (
	"fmt"
	"slices"
	"testing"
)

// TestSweepStaleAmongHeld: a sweep among live sandboxes removes exactly
// the stale ones (a free lock file, or none), and leaves them unlocked;
// Held tells a held lock from a free one without taking it.
func TestSweepStaleAmongHeld(t *testing.T) {
	state := t.TempDir()
	var ids, stale []string
	for i := range 40 {
		id := fmt.Sprintf("sb-live%02d", i)
		l, err := Sandbox(state, id)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release()
		ids = append(ids, id)
	}
	for i := range 3 {
		id := fmt.Sprintf("sb-stale%02d", i)
		l, err := Sandbox(state, id)
		if err != nil {
			t.Fatal(err)
		}
		l.Drop() // its owner died: the file stays, the lock is free
		ids = append(ids, id)
		stale = append(stale, id)
	}
	ids = append(ids, "sb-nolock") // a leftover whose lock file is gone too
	stale = append(stale, "sb-nolock")

	var removed []string
	if err := SweepStale(state, ids, func(id string) error {
		removed = append(removed, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, stale) {
		t.Errorf("removed %v, want the stale ones %v", removed, stale)
	}
	if !Held(SandboxDir(state), ids[0]) {
		t.Errorf("%s is held, Held says not", ids[0])
	}
	// What was removed is not left locked.
	for _, id := range stale {
		if Held(SandboxDir(state), id) {
			t.Errorf("%s is still locked after the sweep", id)
		}
	}
}

// BenchmarkSweepStaleHeld is a sweep over n sandboxes that are all alive
// (a one-shot run's, beside a daemon's): it removes nothing.
func BenchmarkSweepStaleHeld(b *testing.B) {
	for _, n := range []int{100, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			state := b.TempDir()
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("sb-%06d", i)
				l, err := Sandbox(state, ids[i])
				if err != nil {
					b.Fatal(err)
				}
				defer l.Release()
			}
			for b.Loop() {
				_ = SweepStale(state, ids, func(string) error { return nil })
			}
		})
	}
}
