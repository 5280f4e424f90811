package supervisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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

// sharedPauseFixture is a daemon with its own state directory whose
// snapshots (and so pause images) are in bucket/prefix of objects, over
// drv: two of them on one bucket are two hosts of the same kind.
func sharedPauseFixture(t *testing.T, objects *objstore.Client, bucket string, drv *fake.Driver) *Supervisor {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := s3store.Open(context.Background(), objects, bucket, "shared/")
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
	t.Cleanup(func() {
		_ = sup.Close(context.Background())
		st.Close()
	})
	return sup
}

// TestPauseSharedStore: with the snapshots in the object store, a pause
// on one daemon is resumed on another with its own state directory on
// the same bucket; an object changed or cut short in the bucket is
// refused by digest; the daemon that paused it forgets it once the other
// resumed it; a resume here with a spoiled local copy takes the store's.
func TestPauseSharedStore(t *testing.T) {
	testcap.Require(t, "s3")
	ctx := context.Background()
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	objects := objClient(t, srv, srv.SecretKey)
	drv := &fake.Driver{Pausable: true} // one kind of host: the driver keeps the fake's memory
	a := sharedPauseFixture(t, objects, "pauses", drv)
	b := sharedPauseFixture(t, objects, "pauses", drv)

	in, err := a.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", "state"}}); err != nil {
		t.Fatal(err)
	}
	p, err := a.Pause(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Paused == nil || p.Paused.Stored == nil || len(p.Paused.Stored.Blobs) != 1 || !strings.HasPrefix(p.Paused.Stored.Where, "s3://pauses/shared/") {
		t.Fatalf("paused with the object store: %+v", p.Paused)
	}
	if _, err := os.Stat(filepath.Join(a.pausedDir(in.ID), "image")); err != nil {
		t.Errorf("the local copy is gone after the pause: %v", err)
	}
	keys := func(prefix string) []string {
		var out []string
		if err := objects.List(ctx, "pauses", prefix, func(o objstore.Object) error { out = append(out, o.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := keys("shared/paused/"); len(got) != 1 || got[0] != "shared/paused/"+in.ID+".json" {
		t.Fatalf("the bucket's paused records: %v", got)
	}
	blobs := keys("shared/blobs/")
	if len(blobs) != 1 {
		t.Fatalf("the bucket's content: %v", blobs)
	}
	// The image counts once toward the key's stored bytes: as a paused
	// sandbox's, not as snapshot content too.
	if n, err := a.storedBytes(ctx, alice.KeyID, ""); err != nil || n != p.Paused.Bytes {
		t.Errorf("alice's stored bytes on the daemon that paused: %d, %v; want the image's %d", n, err, p.Paused.Bytes)
	}

	// Changed or cut short in the bucket: refused, with nothing taken up.
	orig, err := objects.GetBytes(ctx, "pauses", blobs[0], 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{"changed": []byte("fake image of sb-someone-else\n"), "truncated": orig[:3]} {
		if err := objects.PutBytes(ctx, "pauses", blobs[0], bad, "application/octet-stream", nil); err != nil {
			t.Fatal(err)
		}
		_, err := b.Resume(ctx, alice, in.ID)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "changed or cut short") || !strings.Contains(err.Error(), "s3://pauses/shared/") {
			t.Errorf("%s: resume on the other daemon: %v", name, err)
		}
		if _, err := b.store.GetSandbox(in.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: the other daemon took up a sandbox it refused: %v", name, err)
		}
	}
	if err := objects.PutBytes(ctx, "pauses", blobs[0], orig, "application/octet-stream", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx, bob, in.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob resumed alice's sandbox on the other daemon: %v", err)
	}

	// Resumed on the other daemon, where it goes on.
	r, err := b.Resume(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateRunning {
		t.Fatalf("resumed on the other daemon: %+v", r)
	}
	fs, done, err := b.Files(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = fs.ReadFile(ctx, "/workspace/kept", 0, 0, &out)
	done()
	if err != nil || out.String() != "state" {
		t.Fatalf("on the other daemon the file reads %q, %v", out.String(), err)
	}
	if got := keys("shared/"); len(got) != 0 {
		t.Errorf("the bucket still holds %v after the resume", got)
	}
	// The daemon that paused it learns at its own resume that it moved.
	if _, err := a.Resume(ctx, alice, in.ID); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("resume on the daemon it moved from: %v", err)
	}
	if g, err := a.Get(ctx, alice, in.ID); err != nil || g.State != store.StateDestroyed || g.EndReason != "moved" {
		t.Errorf("on the daemon it moved from: %+v, %v", g, err)
	}
	if _, err := os.Stat(a.pausedDir(in.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old local copy outlived the move: %v", err)
	}

	// Paused again where it runs now; its local copy spoiled: the resume
	// takes the store's.
	p2, err := b.Pause(ctx, alice, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Paused.Stored == nil || p2.Paused.Stored.Gen == p.Paused.Stored.Gen {
		t.Fatalf("the second pause's store: %+v", p2.Paused.Stored)
	}
	if err := os.Truncate(filepath.Join(b.pausedDir(in.ID), "image"), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx, alice, in.ID); err != nil {
		t.Fatalf("resume with a spoiled local copy and a good one in the store: %v", err)
	}
	// Paused and deleted: nothing stays in the bucket.
	if _, err := b.Pause(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if got := keys("shared/"); len(got) != 3 { // the record, the image, the key's index entry
		t.Errorf("the bucket holds %v after the third pause", got)
	}
	if err := b.Kill(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if got := keys("shared/"); len(got) != 0 {
		t.Errorf("the bucket still holds %v after the paused sandbox's delete", got)
	}
}
