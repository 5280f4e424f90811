package api

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestSnapshotsOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{snapshots: true})
	c := e.agent()
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Checkpoints: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Checkpoints != 2 {
		t.Fatalf("checkpoints %d", sb.Checkpoints)
	}
	if err := c.WriteFile(ctx, sb.ID, "notes.txt", strings.NewReader("alpha\nbeta\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{Name: "v1", Label: "first draft"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.ID, "sn-") || snap.Files != 1 || snap.Label != "first draft" {
		t.Fatalf("snapshot %+v", snap)
	}
	// Names are checked: no paths, no ids.
	_, err = c.Snapshot(ctx, sb.ID, client.SnapshotRequest{Name: "../../etc"})
	apiError(t, err, http.StatusBadRequest, "invalid")
	_, err = c.GetSnapshot(ctx, "", "sn-../../x", false)
	apiError(t, err, http.StatusBadRequest, "invalid")

	// A failing transactional command is rolled back.
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"write", "notes.txt", "broken", "1"}, Rollback: client.RollbackOnFailure})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rollback == nil || !res.Rollback.RolledBack || res.Rollback.Changed != 1 {
		t.Fatalf("rollback %+v", res.Rollback)
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}, Rollback: "sometimes"})
	apiError(t, err, http.StatusBadRequest, "invalid")

	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"write", "notes.txt", "alpha\nBETA\n"}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Diff(ctx, sb.ID, client.DiffOptions{From: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Modified != 1 || !strings.Contains(d.Changes[0].Unified, "-beta\n+BETA\n") {
		t.Fatalf("diff %+v", d)
	}
	txt, err := c.DiffText(ctx, sb.ID, client.DiffOptions{Step: 2})
	if err != nil || !strings.Contains(txt, "modified /workspace/notes.txt") {
		t.Fatalf("diff of step 2: %q, %v", txt, err)
	}
	// Undo the last step.
	rr, err := c.Restore(ctx, sb.ID, client.RestoreRequest{UndoSteps: 1})
	if err != nil || rr.Changed != 1 {
		t.Fatalf("undo: %+v, %v", rr, err)
	}
	var buf bytes.Buffer
	if err := c.ReadFileTo(ctx, sb.ID, "notes.txt", &buf); err != nil || buf.String() != "alpha\nbeta\n" {
		t.Fatalf("after undo: %q, %v", buf.String(), err)
	}
	list, err := c.ListSnapshots(ctx, sb.ID)
	if err != nil || len(list) != 3 {
		t.Fatalf("list %v, %v", list, err)
	}
	got, err := c.GetSnapshot(ctx, sb.ID, "v1", true)
	if err != nil || len(got.Tree) != 2 {
		t.Fatalf("get with tree: %+v, %v", got, err)
	}
	fr, err := c.Fork(ctx, snap.ID, client.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := c.ReadFileTo(ctx, fr.Sandbox.ID, "notes.txt", &buf); err != nil || buf.String() != "alpha\nbeta\n" {
		t.Fatalf("the fork's file: %q, %v", buf.String(), err)
	}
	// Another key: not found in its lists, forbidden to fork or restore.
	other, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	if l, _ := other.ListSnapshots(ctx, ""); len(l) != 0 {
		t.Fatalf("another key lists %d snapshots", len(l))
	}
	_, err = other.Fork(ctx, snap.ID, client.ForkRequest{})
	apiError(t, err, http.StatusForbidden, "forbidden")
	osb, err := other.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = other.Restore(ctx, osb.ID, client.RestoreRequest{Snapshot: snap.ID})
	apiError(t, err, http.StatusForbidden, "forbidden")
	if err := c.DeleteSnapshot(ctx, sb.ID, "v1"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSnapshot(ctx, "", snap.ID, false)
	apiError(t, err, http.StatusNotFound, "not_found")
}

func TestSnapshotsWithoutAStore(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	c := e.agent()
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Snapshot(ctx, sb.ID, client.SnapshotRequest{})
	ae := apiError(t, err, http.StatusNotImplemented, "unsupported")
	if !strings.Contains(ae.Message, "snapshot store") {
		t.Errorf("message %q", ae.Message)
	}
}
