package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestAdmissionCountsTmpfs: what a sandbox can pin in RAM is its memory
// limit and its tmpfs mounts (/workspace, /tmp and /dev/shm, which has the
// size of /tmp); admission and the key's memory quota count all of it (the
// security review's F6 filled the tmpfs mounts through the file API, past
// what admission had counted).
func TestAdmissionCountsTmpfs(t *testing.T) {
	lim := sandbox.Limits{MemoryBytes: 256 << 20, DiskBytes: 256 << 20, TmpBytes: 64 << 20}
	if got, want := lim.PinnableBytes(), int64(640<<20); got != want {
		t.Fatalf("PinnableBytes %d, want %d (memory + disk + tmp + shm)", got, want)
	}
	if got, want := (sandbox.Limits{}).PinnableBytes(), int64(sandbox.DefaultMemory+sandbox.DefaultDisk+2*sandbox.DefaultTmp); got != want {
		t.Fatalf("PinnableBytes of the defaults %d, want %d", got, want)
	}

	f := newFixture(t, Config{MemoryReserve: 512 << 20})
	ctx := context.Background()
	// 1 GiB free for sandboxes: one of 640 MiB fits, a second does not.
	f.mem.Store(1536 << 20)
	if _, err := f.sup.Create(ctx, alice, CreateRequest{Limits: lim}); err != nil {
		t.Fatal(err)
	}
	_, err := f.sup.Create(ctx, bob, CreateRequest{Limits: lim})
	if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "640 MiB") || !strings.Contains(err.Error(), "/dev/shm") {
		t.Fatalf("a second sandbox of 256 MiB memory and 384 MiB of tmpfs in 1 GiB: %v", err)
	}

	// The key's memory quota counts the same.
	f.mem.Store(64 << 30)
	c := Caller{KeyID: "key-q", Quota: store.Quota{MaxMemoryBytes: 1 << 30}}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: lim}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: lim}); !errors.Is(err, ErrQuota) {
		t.Fatalf("a key with a 1 GiB quota made two sandboxes that can pin 640 MiB each: %v", err)
	}
}

// overheadDriver is the fake driver whose sandboxes cost the host 100 MiB
// beyond their limits.
type overheadDriver struct{ *fake.Driver }

func (overheadDriver) Overhead(sandbox.Spec) sandbox.Overhead {
	return sandbox.Overhead{MemoryBytes: 100 << 20}
}

// TestAdmissionCountsOverhead: admission and the key's memory quota add
// what the driver declares a sandbox costs beyond its limits.
func TestAdmissionCountsOverhead(t *testing.T) {
	lim := sandbox.Limits{MemoryBytes: 256 << 20, DiskBytes: 256 << 20, TmpBytes: 64 << 20} // 640 MiB pinnable
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mem atomic.Int64
	mem.Store(512<<20 + 1400<<20) // 1400 MiB free: two of 640 MiB, not two of 740 MiB
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": overheadDriver{&fake.Driver{}}},
		Config: Config{MemoryReserve: 512 << 20}, MemAvailable: func() (int64, error) { return mem.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	if _, err := sup.Create(ctx, alice, CreateRequest{Limits: lim}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Create(ctx, bob, CreateRequest{Limits: lim}); !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "740 MiB") {
		t.Fatalf("a second sandbox of 640 MiB and 100 MiB of overhead in 1400 MiB: %v", err)
	}
	mem.Store(64 << 30)
	c := Caller{KeyID: "key-q", Quota: store.Quota{MaxMemoryBytes: 1400 << 20}}
	if _, err := sup.Create(ctx, c, CreateRequest{Limits: lim}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Create(ctx, c, CreateRequest{Limits: lim}); !errors.Is(err, ErrQuota) {
		t.Fatalf("a key with a 1400 MiB quota made two sandboxes that cost 740 MiB each: %v", err)
	}
}
