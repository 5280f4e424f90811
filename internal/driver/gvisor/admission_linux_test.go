package gvisor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestAdmissionCountsOverhead: a daemon whose host has room for three
// gVisor sandboxes and a half, as gVisor sizes them (their limits and
// gVisor's own room, the host cgroup's), makes three and refuses the
// fourth before the host runs out: counted by their limits alone
// (PinnableBytes), six would have been admitted, and the host cgroups of
// six can hold more than the host has.
func TestAdmissionCountsOverhead(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)
	lim := sandbox.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 64, DiskBytes: 16 << 20, TmpBytes: 16 << 20}
	spec := sandbox.Spec{Limits: lim}
	per := sandbox.HostBytes(d, spec)
	if want := lim.PinnableBytes() + hostLimitsFor(lim.WithDefaults(), false).MemoryBytes - lim.MemoryBytes; per != want || per <= lim.PinnableBytes() {
		t.Fatalf("HostBytes %d, want %d: the limits and the host cgroup's room beyond the memory limit", per, want)
	}
	const fit, reserve = 3, 64 << 20
	avail := int64(reserve + fit*per + per/2)
	if byLimits := (avail - reserve) / lim.PinnableBytes(); byLimits <= fit || byLimits*per <= avail-reserve {
		t.Fatalf("the budget does not tell the two counts apart: %d by limits", byLimits)
	}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mem atomic.Int64
	mem.Store(avail)
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"gvisor": d},
		Config:       supervisor.Config{MemoryReserve: reserve, Templates: []supervisor.Template{{Name: "default", Driver: "gvisor"}}},
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := supervisor.Caller{KeyID: "key-a"}
	for i := range fit {
		if _, err := sup.Create(ctx, c, supervisor.CreateRequest{Limits: lim}); err != nil {
			t.Fatalf("sandbox %d of %d: %v", i+1, fit, err)
		}
	}
	if _, err := sup.Create(ctx, c, supervisor.CreateRequest{Limits: lim}); !errors.Is(err, supervisor.ErrCapacity) {
		t.Fatalf("a fourth sandbox where three and a half fit: %v, want ErrCapacity", err)
	}
}
