package supervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestPauseStoredQuota: paused sandboxes' images count toward their key's
// stored bytes (max_snapshot_bytes): a pause that would pass it is
// refused with the reason, and the sandbox runs on.
func TestPauseStoredQuota(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sup, st := pauseFixture(t, dir, &fake.Driver{Pausable: true}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	// A fake image is "fake image of sb-…\n": 30-odd bytes; two do not fit.
	k, _, err := st.NewKey("small", store.RoleAgent, store.Quota{MaxSnapshotBytes: 50}, store.RateLimits{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := Caller{KeyID: k.ID, Quota: k.Quota}
	a, err := sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, c, a.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sup.Pause(ctx, c, b.ID)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "max_snapshot_bytes") || !strings.Contains(err.Error(), "runs on") {
		t.Fatalf("a pause past the key's stored bytes: %v", err)
	}
	if in, _ := sup.Get(ctx, c, b.ID); in.State != store.StateRunning || in.Paused != nil {
		t.Fatalf("after the refused pause: %s %+v", in.State, in.Paused)
	}
	if res, err := sup.Exec(ctx, c, b.ID, ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the refused pause: %+v %v", res, err)
	}
	// Once a is deleted, b's pause fits.
	if err := sup.Kill(ctx, c, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, c, b.ID); err != nil {
		t.Fatalf("pause once the other paused sandbox is gone: %v", err)
	}
}
