package hostlock

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
)

// TestSweepStalePassesOverHeldLocks: a sweep among many live sandboxes
// opens the lock files of the stale ones only (the live ones are read off
// /proc/locks at once), and removes exactly the stale ones. Before, it
// opened and tried every lock: a one-shot run beside a daemon's thousands
// of sandboxes paid a few system calls for each.
func TestSweepStalePassesOverHeldLocks(t *testing.T) {
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

	var checks atomic.Int64
	isHeld = func(dir, name string) bool {
		checks.Add(1)
		return Held(dir, name)
	}
	defer func() { isHeld = Held }()

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
	if n := checks.Load(); n != int64(len(stale)) {
		t.Errorf("the sweep opened %d lock files one by one, want %d (the stale ones; the %d held ones come from /proc/locks)", n, len(stale), 40)
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
