package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// fdDriver is the fake driver whose sandboxes hold 400 files open in the
// daemon.
type fdDriver struct{ *fake.Driver }

func (fdDriver) Overhead(sandbox.Spec) sandbox.Overhead { return sandbox.Overhead{Descriptors: 400} }

// TestAdmissionCountsDescriptors: admission refuses a sandbox whose open
// files the daemon has no room for (its RLIMIT_NOFILE, less the reserve),
// before the daemon runs out; a deleted sandbox gives its room back.
func TestAdmissionCountsDescriptors(t *testing.T) {
	defer func(f func() int64) { fileLimit = f }(fileLimit)
	fileLimit = func() int64 { return descriptorReserve + 1000 } // two of 400, not three
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": fdDriver{&fake.Driver{}}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	var ids []string
	for range 2 {
		in, err := sup.Create(ctx, alice, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	if _, err := sup.Create(ctx, bob, CreateRequest{}); !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
		t.Fatalf("a third sandbox of 400 open files in room for 1000: %v", err)
	}
	if err := sup.Kill(ctx, alice, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Create(ctx, bob, CreateRequest{}); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
