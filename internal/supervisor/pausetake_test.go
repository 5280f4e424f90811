package supervisor

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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
