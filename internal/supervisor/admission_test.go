package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"

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
