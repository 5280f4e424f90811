package supervisor

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// waitState waits for sandbox id to be in state want.
func waitState(t *testing.T, sup *Supervisor, id string, want store.State) Info {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		in, err := sup.Get(context.Background(), alice, id)
		if err == nil && in.State == want {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: %+v %v, want state %s", id, in, err, want)
		}
	}
}

// TestPauseAtTTL: a sandbox made with on_timeout pause is paused at its
// TTL, not ended; with auto_resume an exec resumes it, with its TTL as
// made; without, an exec is refused as for any paused sandbox.
func TestPauseAtTTL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	drv := &fake.Driver{Pausable: true}
	clk := &clock{now: time.Now()}
	sup, _ := pauseFixture(t, dir, drv, clk)
	defer sup.Close(ctx)

	if _, err := sup.Create(ctx, alice, CreateRequest{AutoResume: true}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("auto_resume without on_timeout pause: %v", err)
	}
	if _, err := sup.Create(ctx, alice, CreateRequest{OnTimeout: "sleep"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("on_timeout sleep: %v", err)
	}
	wake, err := sup.Create(ctx, alice, CreateRequest{TTL: 5 * time.Second, OnTimeout: OnTimeoutPause, AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := sup.Create(ctx, alice, CreateRequest{TTL: 5 * time.Second, OnTimeout: OnTimeoutPause})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sup.Create(ctx, alice, CreateRequest{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if wake.Lifecycle == nil || !wake.Lifecycle.AutoResume || wake.Lifecycle.TTL != 5*time.Second {
		t.Fatalf("lifecycle on record: %+v", wake.Lifecycle)
	}
	if _, err := sup.Exec(ctx, alice, wake.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", "state"}}); err != nil {
		t.Fatal(err)
	}
	clk.add(6 * time.Second)
	if n := sup.ReapExpired(); n != 1 {
		t.Errorf("the reaper ended %d sandboxes at their TTL, want 1 (the one without on_timeout pause)", n)
	}
	waitState(t, sup, wake.ID, store.StatePaused)
	waitState(t, sup, sleep.ID, store.StatePaused)
	if in, _ := sup.Get(ctx, alice, plain.ID); in.State == store.StatePaused || in.State == store.StateRunning {
		t.Errorf("a sandbox without on_timeout pause is %s after its TTL", in.State)
	}

	if _, err := sup.Exec(ctx, alice, sleep.ID, ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrPaused) {
		t.Errorf("exec in a paused sandbox without auto_resume: %v", err)
	}
	if _, err := sup.Exec(ctx, bob, wake.ID, ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob's exec in alice's paused sandbox: %v", err)
	}
	if in, _ := sup.Get(ctx, alice, wake.ID); in.State != store.StatePaused {
		t.Fatalf("bob's refused exec resumed alice's sandbox: %s", in.State)
	}
	if res, err := sup.Exec(ctx, alice, wake.ID, ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in a paused sandbox with auto_resume: %+v %v", res, err)
	}
	in := waitState(t, sup, wake.ID, store.StateRunning)
	fs, done, err := sup.Files(ctx, alice, wake.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = fs.ReadFile(ctx, "/workspace/kept", 0, 0, &out)
	done()
	if err != nil || out.String() != "state" {
		t.Fatalf("after the auto-resume the file reads %q, %v", out.String(), err)
	}
	if left := in.ExpiresAt.Sub(clk.Now()); left < 4*time.Second || left > 5*time.Second {
		t.Errorf("after its auto-resume %v of its TTL is left, want the 5s it was made with", left)
	}
	// Its next TTL pauses it again.
	clk.add(6 * time.Second)
	sup.ReapExpired()
	waitState(t, sup, wake.ID, store.StatePaused)
}

// TestPauseAtTTLUnsupported: on_timeout pause on a driver that cannot
// pause is refused at create with the driver's reason.
func TestPauseAtTTLUnsupported(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sup, _ := pauseFixture(t, dir, &fake.Driver{}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	if _, err := sup.Create(ctx, alice, CreateRequest{OnTimeout: OnTimeoutPause}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("on_timeout pause on a driver without pause: %v", err)
	}
}
