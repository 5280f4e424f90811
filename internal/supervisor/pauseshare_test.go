package supervisor

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// TestPauseSharedListed: a sandbox paused on one daemon sharing the
// object store is, on another, in its key's Get and List as paused (and
// not in another key's), before anything takes it up there.
func TestPauseSharedListed(t *testing.T) {
	testcap.Require(t, "s3")
	ctx := context.Background()
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	objects := objClient(t, srv, srv.SecretKey)
	drv := &fake.Driver{Pausable: true}
	a := sharedPauseFixture(t, objects, "pauses", drv)
	b := sharedPauseFixture(t, objects, "pauses", drv)
	mine, err := a.Create(ctx, alice, CreateRequest{Metadata: map[string]string{"job": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := a.Create(ctx, bob, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		c  Caller
		id string
	}{{alice, mine.ID}, {bob, theirs.ID}} {
		if _, err := a.Pause(ctx, p.c, p.id); err != nil {
			t.Fatal(err)
		}
	}
	g, err := b.Get(ctx, alice, mine.ID)
	if err != nil || g.State != store.StatePaused || g.Owner != alice.KeyID || g.Metadata["job"] != "x" {
		t.Fatalf("get on the other daemon: %+v, %v", g, err)
	}
	if _, err := b.Get(ctx, bob, mine.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob's get of alice's sandbox paused elsewhere: %v", err)
	}
	ids := func(c Caller, f Filter) []string {
		t.Helper()
		l, err := b.List(ctx, c, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range l {
			if in.State != store.StatePaused {
				t.Errorf("listed %s %s", in.ID, in.State)
			}
			out = append(out, in.ID)
		}
		return out
	}
	if got := ids(alice, Filter{}); !slices.Equal(got, []string{mine.ID}) {
		t.Errorf("alice's list on the other daemon: %v, want [%s]", got, mine.ID)
	}
	if got := ids(alice, Filter{Metadata: map[string]string{"job": "y"}}); len(got) != 0 {
		t.Errorf("alice's list by other metadata: %v", got)
	}
	if got := ids(alice, Filter{State: store.StateRunning}); len(got) != 0 {
		t.Errorf("alice's running list: %v", got)
	}
	if got := ids(bob, Filter{}); !slices.Equal(got, []string{theirs.ID}) {
		t.Errorf("bob's list on the other daemon: %v, want [%s]", got, theirs.ID)
	}
	// Taken up on the other daemon: listed once, running.
	if _, err := b.Resume(ctx, alice, mine.ID); err != nil {
		t.Fatal(err)
	}
	l, err := b.List(ctx, alice, Filter{})
	if err != nil || len(l) != 1 || l[0].State != store.StateRunning {
		t.Errorf("alice's list after the resume there: %+v, %v", l, err)
	}
	// Deleted on the other daemon: only by its key; the bucket keeps
	// nothing of it, and the daemon that paused it learns it is gone.
	if err := b.Kill(ctx, alice, theirs.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("alice's delete of bob's sandbox paused elsewhere: %v", err)
	}
	if err := b.Kill(ctx, bob, theirs.ID); err != nil {
		t.Fatalf("bob's delete on the other daemon: %v", err)
	}
	if _, err := b.Get(ctx, bob, theirs.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("get after the delete: %v", err)
	}
	var left []string
	if err := objects.List(ctx, "pauses", "shared/", func(o objstore.Object) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the bucket holds %v after the delete", left)
	}
	if _, err := a.Resume(ctx, bob, theirs.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("resume on the daemon that paused it, after its delete elsewhere: %v", err)
	}
}

// slowResume is a driver whose resume takes a while, so that resumes on
// several daemons at once overlap.
type slowResume struct{ *fake.Driver }

func (d slowResume) Resume(ctx context.Context, id string, state []byte, dir string) (sandbox.Instance, error) {
	time.Sleep(300 * time.Millisecond)
	return d.Driver.Resume(ctx, id, state, dir)
}

// TestPauseSharedRace: three daemons on one bucket resume one paused
// sandbox at once; exactly one does, the others are told another daemon
// has it (409 busy while it resumes, or not found once it moved), and
// no record stays in the bucket. Five rounds.
func TestPauseSharedRace(t *testing.T) {
	testcap.Require(t, "s3")
	ctx := context.Background()
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	objects := objClient(t, srv, srv.SecretKey)
	drv := &fake.Driver{Pausable: true}
	var sups []*Supervisor
	for range 3 {
		s := sharedPauseFixture(t, objects, "pauses", drv)
		s.opts.Drivers = map[string]sandbox.Driver{"native": slowResume{drv}}
		sups = append(sups, s)
	}
	busy := 0
	for round := range 5 {
		in, err := sups[0].Create(ctx, alice, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sups[0].Pause(ctx, alice, in.ID); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(sups))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range sups {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Resume(ctx, alice, in.ID)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrBusy) && strings.Contains(err.Error(), "being resumed by another daemon"):
				busy++
			case errors.Is(err, sandbox.ErrNotFound):
			default:
				t.Errorf("round %d: daemon %d: %v", round, i, err)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d daemons resumed it (%v), want 1", round, won, errs)
		}
		// The losers keep nothing of it: no record, no image.
		for i, s := range sups[1:] {
			if errs[i+1] == nil {
				continue
			}
			if _, err := s.store.GetSandbox(in.ID); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("round %d: daemon %d, which lost, keeps a record of it: %v", round, i+1, err)
			}
			if _, err := os.Stat(s.pausedDir(in.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("round %d: daemon %d, which lost, keeps its image: %v", round, i+1, err)
			}
		}
		var left []string
		if err := objects.List(ctx, "pauses", "shared/", func(o objstore.Object) error { left = append(left, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("round %d: the bucket holds %v after the resume", round, left)
		}
	}
	t.Logf("losers told busy: %d of 10", busy)
}
