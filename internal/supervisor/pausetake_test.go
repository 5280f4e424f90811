package supervisor

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// bucketKeys lists what the bucket holds under the fixtures' prefix.
func bucketKeys(t *testing.T, objects *objstore.Client) []string {
	t.Helper()
	var keys []string
	if err := objects.List(context.Background(), "pauses", "shared/", func(o objstore.Object) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestPauseSharedAutoResume: on a daemon that does not hold it, a call
// that needs a sandbox paused on another daemon of the same bucket
// running is answered as for one paused here: refused as paused (not as
// unknown) without auto-resume, or, made with auto-resume, served once
// the sandbox is taken up and resumed there. Another key's call is
// refused and resumes nothing.
func TestPauseSharedAutoResume(t *testing.T) {
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
	wake, err := a.Create(ctx, alice, CreateRequest{OnTimeout: OnTimeoutPause, AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := a.Create(ctx, alice, CreateRequest{OnTimeout: OnTimeoutPause})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, alice, wake.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", "state"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{wake.ID, sleep.ID} {
		if _, err := a.Pause(ctx, alice, id); err != nil {
			t.Fatal(err)
		}
	}

	// Without auto-resume: paused, say resume it; nothing taken up.
	_, err = b.Exec(ctx, alice, sleep.ID, ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, ErrPaused) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("exec on b in a sandbox paused on a without auto-resume: %v", err)
	}
	if _, _, err := b.Files(ctx, alice, sleep.ID); !errors.Is(err, ErrPaused) {
		t.Errorf("files on b of a sandbox paused on a without auto-resume: %v", err)
	}
	if _, err := b.store.GetSandbox(sleep.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("b recorded the sandbox it refused: %v", err)
	}
	// Another key's: refused, and it stays paused in the bucket.
	if _, err := b.Exec(ctx, bob, wake.ID, ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob's exec on b in alice's sandbox paused on a: %v", err)
	}
	if g, err := b.Get(ctx, alice, wake.ID); err != nil || g.State != store.StatePaused {
		t.Fatalf("after bob's refused exec: %+v %v", g, err)
	}
	// With auto-resume: taken up on b, and the call served there.
	fs, done, err := b.Files(ctx, alice, wake.ID)
	if err != nil {
		t.Fatalf("files on b of a sandbox paused on a with auto-resume: %v", err)
	}
	var out bytes.Buffer
	err = fs.ReadFile(ctx, "/workspace/kept", 0, 0, &out)
	done()
	if err != nil || out.String() != "state" {
		t.Fatalf("the file after the resume on b reads %q, %v", out.String(), err)
	}
	if g, err := b.Get(ctx, alice, wake.ID); err != nil || g.State != store.StateRunning {
		t.Fatalf("on b after the call: %+v %v", g, err)
	}
	if res, err := b.Exec(ctx, alice, wake.ID, ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on b after: %+v %v", res, err)
	}
	if _, err := a.Resume(ctx, alice, wake.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("resume on a after b took it up: %v", err)
	}
	// Paused again on b: a's exec (a recorded it moved) takes it back.
	if _, err := b.Pause(ctx, alice, wake.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Exec(ctx, alice, wake.ID, ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on a in the sandbox it left, paused again on b: %+v %v", res, err)
	}
	if keys := bucketKeys(t, objects); len(keys) != 3 { // sleep's record, index entry, image
		t.Errorf("the bucket holds %v, want sleep's three objects", keys)
	}
}

// sharedPauseAt is sharedPauseFixture on state directory dir, its
// registry returned and closed by the caller: a daemon that can die.
func sharedPauseAt(t *testing.T, objects *objstore.Client, drv *fake.Driver, dir string) (*Supervisor, *store.Store) {
	t.Helper()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := s3store.Open(context.Background(), objects, "pauses", "shared/")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := Template{Name: DefaultTemplate, TTL: Duration(time.Hour), IdleTimeout: Duration(10 * time.Minute), PausedTTL: Duration(48 * time.Hour)}
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Snapshots: snaps,
		Config:       Config{StateDir: dir, Templates: []Template{tmpl}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return sup, st
}

// TestPauseSharedTakeUpDies: a daemon that dies at each step of taking a
// sandbox up from the shared bucket (its image downloaded and recorded;
// its claim written; resumed and recorded running; the bucket's record
// removed) does not lose it. Before the resume, the sandbox stays paused
// in the bucket: the daemon's next start takes its own claim over at once
// and resumes it, or, the daemon not back, another daemon resumes it once
// the claim is stale. After the resume, the daemon's next start removes
// the spent pause from the bucket, so that no other daemon resumes a
// second copy. The death: the daemon's take-up stopped for good at the
// step (Supervisor.takeStep), its registry closed, nothing of it run
// after.
func TestPauseSharedTakeUpDies(t *testing.T) {
	testcap.Require(t, "s3")
	ctx := context.Background()
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	objects := objClient(t, srv, srv.SecretKey)
	drv := &fake.Driver{Pausable: true}
	a := sharedPauseFixture(t, objects, "pauses", drv)
	hang := make(chan struct{}) // the dead daemons' take-ups stay stopped
	t.Cleanup(func() { close(hang) })
	for _, tc := range []struct {
		step string
		back bool // the daemon starts again (else another daemon takes it up)
	}{{"adopted", true}, {"claimed", true}, {"claimed", false}, {"resumed", true}, {"dropped", true}} {
		name := tc.step
		if !tc.back {
			name += "/not-back"
		}
		in, err := a.Create(ctx, alice, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", name}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Pause(ctx, alice, in.ID); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		b, st := sharedPauseAt(t, objects, drv, dir)
		died := make(chan struct{})
		b.takeStep = func(step string) {
			if step == tc.step {
				close(died)
				<-hang
				runtime.Goexit()
			}
		}
		go func() { _, _ = b.Resume(ctx, alice, in.ID) }()
		select {
		case <-died:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the take-up did not reach its step", name)
		}
		st.Close() // b is dead

		resumed := tc.step == "resumed" || tc.step == "dropped"
		if tc.step == "claimed" {
			if _, err := a.Resume(ctx, alice, in.ID); !errors.Is(err, ErrBusy) {
				t.Errorf("%s: a's resume while b's claim is young: %v, want busy", name, err)
			}
		}
		switch {
		case resumed:
			// b resumed it before it died: its next start removes the
			// spent pause from the bucket (the fake's sandboxes do not
			// outlive their daemon: it is then lost, as any running one).
			b2, st2 := sharedPauseAt(t, objects, drv, dir)
			if _, err := b2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Resume(ctx, alice, in.ID); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("%s: a's resume after b resumed it: %v, want not found (no second copy)", name, err)
			}
			_ = b2.Close(ctx)
			st2.Close()
		case tc.back:
			b2, st2 := sharedPauseAt(t, objects, drv, dir)
			if _, err := b2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if g, err := b2.Get(ctx, alice, in.ID); err != nil || g.State != store.StatePaused {
				t.Errorf("%s: on b's next start: %+v %v", name, g, err)
			}
			readKept(t, b2, in.ID, name)
			if _, err := a.Resume(ctx, alice, in.ID); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("%s: a's resume after b's: %v, want not found", name, err)
			}
			_ = b2.Close(ctx)
			st2.Close()
		default:
			// b is not back: its claim goes stale, and a takes it up.
			old := claimTTL
			claimTTL = 300 * time.Millisecond
			time.Sleep(400 * time.Millisecond)
			readKept(t, a, in.ID, name)
			claimTTL = old
			if err := a.Kill(ctx, alice, in.ID); err != nil {
				t.Error(err)
			}
		}
		if keys := bucketKeys(t, objects); len(keys) != 0 {
			t.Errorf("%s: the bucket holds %v after", name, keys)
		}
	}
}

// readKept resumes sandbox id on sup and checks its file reads want.
func readKept(t *testing.T, sup *Supervisor, id, want string) {
	t.Helper()
	ctx := context.Background()
	if _, err := sup.Resume(ctx, alice, id); err != nil {
		t.Errorf("%s: resume: %v", want, err)
		return
	}
	fs, done, err := sup.Files(ctx, alice, id)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var out bytes.Buffer
	if err := fs.ReadFile(ctx, "/workspace/kept", 0, 0, &out); err != nil || out.String() != want {
		t.Errorf("%s: after the resume the file reads %q, %v", want, out.String(), err)
	}
}

// TestPausedIndexStale: an index entry of the bucket whose record is gone
// (a daemon died between removing the two), or whose record is another
// key's, is removed by the listing that finds it; the records and the
// entries that hold are left.
func TestPausedIndexStale(t *testing.T) {
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
	var ids []string
	for range 2 {
		in, err := a.Create(ctx, alice, CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Pause(ctx, alice, in.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	gone, kept := ids[0], ids[1]
	if err := objects.Delete(ctx, "pauses", "shared/paused/"+gone+".json"); err != nil {
		t.Fatal(err)
	}
	// An entry under bob's key for alice's sandbox.
	if err := objects.PutBytes(ctx, "pauses", "shared/paused-by/"+bob.KeyID+"/"+kept, nil, "application/octet-stream", nil); err != nil {
		t.Fatal(err)
	}
	index := func() []string {
		var out []string
		for _, k := range bucketKeys(t, objects) {
			if rest, ok := strings.CutPrefix(k, "shared/paused-by/"); ok {
				out = append(out, rest)
			}
		}
		return out
	}
	for _, c := range []Caller{alice, bob} {
		l, err := b.List(ctx, c, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if c.KeyID == alice.KeyID && (len(l) != 1 || l[0].ID != kept) {
			t.Errorf("alice's list: %+v, want %s alone", l, kept)
		}
		if c.KeyID == bob.KeyID && len(l) != 0 {
			t.Errorf("bob's list: %+v, want none", l)
		}
	}
	if got, want := index(), []string{alice.KeyID + "/" + kept}; !slices.Equal(got, want) {
		t.Errorf("the index after the lists: %v, want %v", got, want)
	}
	if _, err := b.Resume(ctx, alice, kept); err != nil {
		t.Fatal(err)
	}
}
