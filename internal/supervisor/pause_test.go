package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// pauseFixture is a supervisor over a pausable fake driver, its state in
// dir, on clk.
func pauseFixture(t *testing.T, dir string, drv *fake.Driver, clk *clock) (*Supervisor, *store.Store) {
	t.Helper()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := Template{Name: DefaultTemplate, TTL: Duration(time.Hour), IdleTimeout: Duration(10 * time.Minute), PausedTTL: Duration(48 * time.Hour)}
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv},
		Config:       Config{StateDir: dir, Templates: []Template{tmpl}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil },
		Now:          clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return sup, st
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	drv := &fake.Driver{Pausable: true}
	clk := &clock{now: time.Now()}
	sup, _ := pauseFixture(t, dir, drv, clk)
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", "state"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, bob, in.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob paused alice's sandbox: %v", err)
	}
	p, err := sup.Pause(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != store.StatePaused || p.Paused == nil || p.Paused.Bytes == 0 || len(p.Paused.Digests) != 1 || p.Paused.MemoryKept {
		t.Fatalf("paused: %+v %+v", p, p.Paused)
	}
	if got := p.Paused.Until.Sub(p.Paused.At); got != 48*time.Hour {
		t.Errorf("paused TTL %v, want the template's 48h", got)
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrPaused) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("exec in a paused sandbox: %v", err)
	}
	if _, err := sup.Pause(ctx, alice, in.ID); !errors.Is(err, ErrPaused) {
		t.Errorf("pause of a paused sandbox: %v", err)
	}
	// Its TTL (1 h) and idle timeout (10 min) wait while it is paused.
	clk.add(2 * time.Hour)
	if n := sup.ReapExpired(); n != 0 {
		t.Fatalf("the reaper ended %d paused sandboxes before their paused TTL", n)
	}
	r, err := sup.Resume(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateRunning || r.Paused != nil {
		t.Fatalf("resumed: %+v", r)
	}
	if left := r.ExpiresAt.Sub(clk.Now()); left < 50*time.Minute || left > time.Hour {
		t.Errorf("after the resume %v of its TTL is left, want what was left at the pause (about 1h)", left)
	}
	fs, done, err := sup.Files(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = fs.ReadFile(ctx, "/workspace/kept", 0, 0, &out)
	done()
	if err != nil || out.String() != "state" {
		t.Fatalf("after the resume the file reads %q, %v", out.String(), err)
	}
	if _, err := os.Stat(sup.pausedDir(in.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pause image outlived the resume: %v", err)
	}
	if r2, err := sup.Resume(ctx, alice, in.ID); err != nil || r2.State != store.StateRunning {
		t.Errorf("resume of a running sandbox: %+v %v", r2, err)
	}
}

// TestResumeRefusesTampered: an image changed or cut short after the pause
// is refused by its digest, and the sandbox stays paused; deleting it
// removes the image and what the driver kept.
func TestResumeRefusesTampered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(path string) error
	}{
		{"changed", func(p string) error { return os.WriteFile(p, []byte("fake image of someone-else\n"), 0o600) }},
		{"truncated", func(p string) error { return os.Truncate(p, 3) }},
		{"removed", os.Remove},
		{"added", func(p string) error { return os.WriteFile(filepath.Join(filepath.Dir(p), "extra"), nil, 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			drv := &fake.Driver{Pausable: true}
			sup, _ := pauseFixture(t, dir, drv, &clock{now: time.Now()})
			defer sup.Close(ctx)
			in, err := sup.Create(ctx, alice, CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sup.Pause(ctx, alice, in.ID); err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(filepath.Join(sup.pausedDir(in.ID), "image")); err != nil {
				t.Fatal(err)
			}
			_, err = sup.Resume(ctx, alice, in.ID)
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "changed or cut short") {
				t.Fatalf("resume of a tampered image: %v", err)
			}
			if got, _ := sup.Get(ctx, alice, in.ID); got.State != store.StatePaused {
				t.Fatalf("after a refused resume it is %s", got.State)
			}
			if err := sup.Kill(ctx, alice, in.ID); err != nil {
				t.Fatal(err)
			}
			if got, _ := sup.Get(ctx, alice, in.ID); got.State != store.StateDestroyed {
				t.Errorf("deleted paused sandbox is %s", got.State)
			}
			if drv.Discarded.Load() != 1 {
				t.Errorf("the driver discarded %d paused sandboxes, want 1", drv.Discarded.Load())
			}
			if _, err := os.Stat(sup.pausedDir(in.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the image outlived the delete: %v", err)
			}
		})
	}
}

func TestPausedTTL(t *testing.T) {
	ctx := context.Background()
	drv := &fake.Driver{Pausable: true}
	clk := &clock{now: time.Now()}
	sup, _ := pauseFixture(t, t.TempDir(), drv, clk)
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	clk.add(49 * time.Hour)
	if n := sup.ReapExpired(); n != 1 {
		t.Fatalf("the reaper ended %d sandboxes past their paused TTL, want 1", n)
	}
	got, _ := sup.Get(ctx, alice, in.ID)
	if got.State != store.StateDestroyed || got.EndReason != "paused_ttl" || drv.Discarded.Load() != 1 {
		t.Fatalf("past its paused TTL: %s %s, discarded %d", got.State, got.EndReason, drv.Discarded.Load())
	}
}

func TestPauseUnsupported(t *testing.T) {
	ctx := context.Background()
	sup, _ := pauseFixture(t, t.TempDir(), &fake.Driver{}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.Pause(ctx, alice, in.ID)
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(ue.Why, "cannot pause") {
		t.Fatalf("pause on a driver without pause: %v", err)
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("after a refused pause: %v", err)
	}
}

// TestPausedSurvivesRestart: a daemon that stops with a paused sandbox
// leaves it paused for the next one, which resumes it.
func TestPausedSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	drv := &fake.Driver{Pausable: true, DriverName: "native"}
	clk := &clock{now: time.Now()}
	sup, st := pauseFixture(t, dir, drv, clk)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if err := sup.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	sup2, _ := pauseFixture(t, dir, drv, clk)
	defer sup2.Close(ctx)
	if _, err := sup2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := sup2.Get(ctx, alice, in.ID); err != nil || got.State != store.StatePaused {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
	if _, err := sup2.Resume(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sup2.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
}

// TestPauseUnrecorded: a daemon that died after its driver saved a
// sandbox and before it recorded the pause leaves the record running with
// a pending pause; the next daemon finds the sandbox saved (PauseFinder),
// records it paused, and resumes it.
func TestPauseUnrecorded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	drv := &fake.Driver{Pausable: true}
	clk := &clock{now: time.Now()}
	sup, st := pauseFixture(t, dir, drv, clk)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Pause(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if err := sup.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	// As the record was while the driver saved it.
	if _, err := st.UpdateSandbox(in.ID, func(r *store.Sandbox) error {
		r.State = store.StateRunning
		r.Paused = &store.Paused{At: r.Paused.At, Until: r.Paused.Until, TTLLeft: r.Paused.TTLLeft, Pending: true}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	sup2, _ := pauseFixture(t, dir, drv, clk)
	defer sup2.Close(ctx)
	if _, err := sup2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := sup2.Get(ctx, alice, in.ID)
	if err != nil || got.State != store.StatePaused || got.Paused == nil || got.Paused.Pending || len(got.Paused.Digests) != 1 {
		t.Fatalf("after the restart: %+v %+v %v", got, got.Paused, err)
	}
	if _, err := sup2.Resume(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := sup2.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
}

// TestPauseFrozenHolder: the holder of a frozen sandbox runs on and would
// end it at its TTL or idle timeout with no daemon attached (lifetime.go),
// so a freeze tells it the paused TTL instead, with no idle timeout, and
// a thaw tells it the TTL left again.
func TestPauseFrozenHolder(t *testing.T) {
	ctx := context.Background()
	drv := &fake.Driver{Freezable: true}
	clk := &clock{now: time.Now()}
	sup, _ := pauseFixture(t, t.TempDir(), drv, clk)
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sup.mu.Lock()
	fi := sup.live[in.ID].inst.(*fake.Instance)
	sup.mu.Unlock()
	if left, idle := fi.Lifetime(); left < 59*time.Minute || left > time.Hour || idle != 10*time.Minute {
		t.Fatalf("after create the holder was told %v left, idle %v; want the template's 1h and 10m", left, idle)
	}
	p, err := sup.Pause(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Frozen() || p.Paused == nil || !p.Paused.MemoryKept {
		t.Fatalf("paused: frozen %v, %+v", fi.Frozen(), p.Paused)
	}
	if left, idle := fi.Lifetime(); left < 47*time.Hour || left > 48*time.Hour || idle != 0 {
		t.Errorf("a frozen sandbox's holder was told %v left, idle %v; want the paused TTL (48h) and no idle timeout", left, idle)
	}
	clk.add(2 * time.Hour)
	if _, err := sup.Resume(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if left, idle := fi.Lifetime(); fi.Frozen() || left < 59*time.Minute || left > time.Hour || idle != 10*time.Minute {
		t.Errorf("after the thaw the holder was told %v left, idle %v (frozen %v); want the TTL left at the pause (about 1h) and 10m", left, idle, fi.Frozen())
	}
}
