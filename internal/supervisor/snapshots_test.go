package supervisor

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func snapFixture(t *testing.T) (*Supervisor, *snapshot.Local) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Snapshots: snaps,
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sup.Close(context.Background())
		st.Close()
	})
	return sup, snaps
}

func write(t *testing.T, sup *Supervisor, c Caller, id, path, text string) {
	t.Helper()
	f, done, err := sup.Files(context.Background(), c, id)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if err := f.WriteFile(context.Background(), path, strings.NewReader(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, sup *Supervisor, c Caller, id, path string) (string, error) {
	t.Helper()
	f, done, err := sup.Files(context.Background(), c, id)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var b bytes.Buffer
	err = f.ReadFile(context.Background(), path, 0, 0, &b)
	return b.String(), err
}

func TestSnapshotRestoreDiffFork(t *testing.T) {
	sup, snaps := snapFixture(t)
	ctx := context.Background()
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, sup, alice, in.ID, "a.txt", "one\ntwo\n")
	write(t, sup, alice, in.ID, "keep.txt", "same")
	s1, err := sup.Snapshot(ctx, alice, in.ID, SnapshotRequest{Name: "first", Label: "before the change"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Files != 2 || s1.Name != "first" || s1.Owner != alice.KeyID || !strings.Contains(s1.Note, "running processes are not part") {
		t.Fatalf("snapshot %+v", s1)
	}
	if _, err := sup.Snapshot(ctx, alice, in.ID, SnapshotRequest{Name: "first"}); !errors.Is(err, sandbox.ErrExists) {
		t.Fatalf("a second snapshot named first: %v", err)
	}
	for _, bad := range []string{"../x", "a/b", "sn-0123456789ab"} {
		if _, err := sup.Snapshot(ctx, alice, in.ID, SnapshotRequest{Name: bad}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	write(t, sup, alice, in.ID, "a.txt", "one\nTWO\n")
	write(t, sup, alice, in.ID, "new.txt", "added")
	d, err := sup.Diff(ctx, alice, in.ID, DiffRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.From != s1.ID || d.To != Now || d.Added != 1 || d.Modified != 1 || d.Deleted != 0 {
		t.Fatalf("diff %+v", d)
	}
	if !strings.Contains(d.Text(), "-two\n+TWO\n") {
		t.Fatalf("diff text:\n%s", d.Text())
	}
	// Another key can neither see, restore, diff nor fork it.
	if _, err := sup.Restore(ctx, bob, in.ID, RestoreRequest{Snapshot: s1.ID}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob restores alice's sandbox: %v", err)
	}
	bobs, _ := sup.Create(ctx, bob, CreateRequest{})
	if _, err := sup.Restore(ctx, bob, bobs.ID, RestoreRequest{Snapshot: s1.ID}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob restores alice's snapshot into his sandbox: %v", err)
	}
	if _, err := sup.Fork(ctx, bob, ForkRequest{Snapshot: s1.ID}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob forks alice's snapshot: %v", err)
	}
	if l, _ := sup.ListSnapshots(ctx, bob, ""); len(l) != 0 {
		t.Errorf("bob lists %d of alice's snapshots", len(l))
	}
	res, err := sup.Restore(ctx, alice, in.ID, RestoreRequest{Snapshot: "first"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.Removed != 1 {
		t.Errorf("restore stats %+v", res.Stats)
	}
	if got, _ := read(t, sup, alice, in.ID, "a.txt"); got != "one\ntwo\n" {
		t.Errorf("a.txt after restore: %q", got)
	}
	if _, err := read(t, sup, alice, in.ID, "new.txt"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("new.txt after restore: %v", err)
	}
	fr, err := sup.Fork(ctx, alice, ForkRequest{Snapshot: s1.ID})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Sandbox.ID == in.ID || fr.Sandbox.Template != in.Template {
		t.Fatalf("fork %+v", fr.Sandbox)
	}
	if got, _ := read(t, sup, alice, fr.Sandbox.ID, "keep.txt"); got != "same" {
		t.Errorf("fork's keep.txt: %q", got)
	}
	// Deleted: gone from lists, and the quota counts it no more.
	if err := sup.DeleteSnapshot(ctx, alice, "", s1.ID); err != nil {
		t.Fatal(err)
	}
	if u, _ := snaps.Usage(ctx, alice.KeyID); u.Snapshots != 0 {
		t.Errorf("usage after delete %+v", u)
	}
}

func TestSnapshotQuota(t *testing.T) {
	sup, _ := snapFixture(t)
	ctx := context.Background()
	c := alice
	c.Quota = store.Quota{MaxSnapshots: 2, MaxSnapshotFiles: 3}
	in, err := sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := sup.Snapshot(ctx, c, in.ID, SnapshotRequest{}); err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
	}
	if _, err := sup.Snapshot(ctx, c, in.ID, SnapshotRequest{}); !errors.Is(err, ErrQuota) {
		t.Fatalf("a third snapshot: %v", err)
	}
	c.Quota.MaxSnapshots = 10
	for _, p := range []string{"a", "b", "c", "d"} {
		write(t, sup, c, in.ID, p, p)
	}
	if _, err := sup.Snapshot(ctx, c, in.ID, SnapshotRequest{}); !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("a snapshot of more files than the quota: %v", err)
	}
	if got, _ := read(t, sup, c, in.ID, "d"); got != "d" {
		t.Fatal("the sandbox's files changed")
	}
}

func TestTransactionalExecAndCheckpoints(t *testing.T) {
	sup, snaps := snapFixture(t)
	ctx := context.Background()
	in, err := sup.Create(ctx, alice, CreateRequest{Checkpoints: 3})
	if err != nil {
		t.Fatal(err)
	}
	write(t, sup, alice, in.ID, "f", "base")
	// A failing exec that asked for rollback: its write is undone.
	res, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "f", "broken", "3"}, Rollback: sandbox.RollbackOnFailure})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Rollback == nil || !res.Rollback.RolledBack || res.Rollback.Changed != 1 || !strings.Contains(res.Message, "rolled back") {
		t.Fatalf("result %+v rollback %+v", res, res.Rollback)
	}
	if got, _ := read(t, sup, alice, in.ID, "f"); got != "base" {
		t.Fatalf("f after the rollback: %q", got)
	}
	// A succeeding one keeps its change and says nothing was rolled back.
	res, err = sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "f", "step2"}, Rollback: sandbox.RollbackOnFailure})
	if err != nil || res.Rollback == nil || res.Rollback.RolledBack {
		t.Fatalf("result %+v, %v", res.Rollback, err)
	}
	// Steps 3 and 4 without rollback.
	for _, text := range []string{"step3", "step4"} {
		if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "f", text}}); err != nil {
			t.Fatal(err)
		}
	}
	// What did step 3 change?
	d, err := sup.Diff(ctx, alice, in.ID, DiffRequest{Step: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d.Modified != 1 || !strings.Contains(d.Changes[0].Unified, "-step2") || !strings.Contains(d.Changes[0].Unified, "+step3") {
		t.Fatalf("step 3 diff %+v", d)
	}
	// Only the last three checkpoints are kept.
	list, _ := sup.ListSnapshots(ctx, alice, in.ID)
	if len(list) != 3 || list[0].Name != "step-2" {
		t.Fatalf("checkpoints %v", list)
	}
	// Undo the last two steps: the workspace is as before step 3.
	if _, err := sup.Restore(ctx, alice, in.ID, RestoreRequest{UndoSteps: 2}); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, sup, alice, in.ID, "f"); got != "step2" {
		t.Fatalf("f after undoing two steps: %q", got)
	}
	if _, err := sup.Restore(ctx, alice, in.ID, RestoreRequest{UndoSteps: 9}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("undo more steps than ran: %v", err)
	}
	// The checkpoints go with the sandbox.
	if err := sup.Kill(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	if u, _ := snaps.Usage(ctx, alice.KeyID); u.Snapshots != 0 {
		t.Errorf("%d snapshots left after the sandbox ended", u.Snapshots)
	}
}

func TestRollbackWithoutCheckpointsLeavesNoSnapshot(t *testing.T) {
	sup, snaps := snapFixture(t)
	ctx := context.Background()
	in, _ := sup.Create(ctx, alice, CreateRequest{})
	res, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "x", "y", "1"}, Rollback: sandbox.RollbackOnFailure})
	if err != nil || !res.Rollback.RolledBack || res.Rollback.Added != 1 {
		t.Fatalf("%+v %v", res.Rollback, err)
	}
	if u, _ := snaps.Usage(ctx, alice.KeyID); u.Snapshots != 0 {
		t.Errorf("the transactional exec left %d snapshots", u.Snapshots)
	}
	if _, err := sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}, Rollback: sandbox.RollbackOnFailure}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("rollback of a background process: %v", err)
	}
}
