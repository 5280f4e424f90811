package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds snapshots of sandboxes' files: take, list, get, delete,
// restore, diff and fork. rollback.go holds transactional execs and
// checkpoints.

// snapshotNote says what every snapshot holds and what it does not.
const snapshotNote = "files, directories, symlinks and their modes; running processes are not part of a snapshot and go on running across a restore"

// SnapshotRequest asks for a snapshot.
type SnapshotRequest struct {
	// Name is unique among the sandbox's snapshots; empty: none.
	Name  string
	Label string
	// IncludeTmp adds /tmp to /workspace.
	IncludeTmp bool
}

// snapshotter returns l's instance as a Snapshotter, or says why not.
func (s *Supervisor) snapshotter(l *live) (sandbox.Snapshotter, error) {
	if s.opts.Snapshots == nil {
		return nil, &sandbox.UnsupportedError{What: "snapshots", Why: "this daemon keeps no snapshot store", Fix: "run `airlock serve` with a data directory (snapshots live in DIR/snapshots)"}
	}
	l.mu.Lock()
	inst, drv := l.inst, l.rec.Driver
	l.mu.Unlock()
	sn, ok := inst.(sandbox.Snapshotter)
	if d, known := s.opts.Drivers[drv]; !ok || (known && !d.Capabilities().Snapshots) {
		return nil, &sandbox.UnsupportedError{What: "snapshots", Why: "driver " + drv + " cannot snapshot its sandboxes' files", Fix: "use a sandbox of a driver that can (native, gvisor)"}
	}
	return sn, nil
}

// Snapshot takes a snapshot of sandbox id's /workspace (and /tmp).
func (s *Supervisor) Snapshot(ctx context.Context, c Caller, id string, r SnapshotRequest) (snapshot.Info, error) {
	if r.Name != "" {
		if err := snapshot.CheckName(r.Name); err != nil {
			return snapshot.Info{}, err
		}
	}
	if err := snapshot.CheckLabel(r.Label); err != nil {
		return snapshot.Info{}, err
	}
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return snapshot.Info{}, err
	}
	defer done()
	l, err := s.lookup(c, id)
	if err != nil {
		return snapshot.Info{}, err
	}
	roots := []string{sandbox.Workspace}
	if r.IncludeTmp {
		roots = append(roots, "/tmp")
	}
	snap, err := s.take(ctx, c, l, takeRequest{kind: snapshot.KindManual, name: r.Name, label: r.Label, roots: roots})
	if err != nil {
		return snapshot.Info{}, err
	}
	return snap.Info, nil
}

// takeRequest is what take needs.
type takeRequest struct {
	kind, name, label string
	step              int64
	roots             []string
}

// take captures l's trees into the store, within its owner's quota.
func (s *Supervisor) take(ctx context.Context, c Caller, l *live, r takeRequest) (*snapshot.Snapshot, error) {
	sn, err := s.snapshotter(l)
	if err != nil {
		return nil, err
	}
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	rec := l.rec
	l.mu.Unlock()
	owner := rec.Owner
	st := s.opts.Snapshots
	if owner == "" {
		return nil, fmt.Errorf("%w: sandbox %s has no owner yet", ErrNotRunning, rec.ID)
	}
	if r.name != "" {
		if _, err := s.byName(ctx, owner, rec.ID, r.name); err == nil {
			return nil, fmt.Errorf("%w: sandbox %s already has a snapshot named %q: pick another name, or delete that one first", sandbox.ErrExists, rec.ID, r.name)
		}
	}
	q := c.Quota.WithDefaults()
	if owner != c.KeyID {
		q = s.ownerQuota(owner)
	}
	before, err := st.Usage(ctx, owner)
	if err != nil {
		return nil, err
	}
	if before.Snapshots >= q.MaxSnapshots {
		return nil, fmt.Errorf("%w: this key may keep %d snapshots and has %d: delete some (airlock sandbox snapshot rm, DELETE /v1/snapshots/{id})", ErrQuota, q.MaxSnapshots, before.Snapshots)
	}
	busy := l.running() > 0
	start := time.Now()
	capt, err := sn.Capture(ctx, sandbox.CaptureRequest{
		Roots: r.roots,
		Have: func(d string) bool {
			ok, _ := st.HasBlob(ctx, owner, d)
			return ok
		},
		MaxFiles: q.MaxSnapshotFiles,
		MaxBytes: q.MaxSnapshotBytes,
	}, func(ctx context.Context, rd io.Reader) (string, int64, error) {
		return st.PutBlob(ctx, owner, rd)
	})
	if err != nil {
		return nil, s.snapshotError(rec.ID, "snapshot", err)
	}
	after, err := st.Usage(ctx, owner)
	if err != nil {
		return nil, err
	}
	if paused := s.pausedBytes(owner, ""); after.Bytes+paused > q.MaxSnapshotBytes {
		return nil, fmt.Errorf("%w: this key's snapshots (and paused sandboxes' images, %s) may hold %s and would hold %s with this one: delete snapshots, or remove large files from the sandbox", ErrQuota, bytesText(paused), bytesText(q.MaxSnapshotBytes), bytesText(after.Bytes+paused))
	}
	snap := &snapshot.Snapshot{Info: snapshot.Info{
		ID: snapshot.NewID(), Name: r.name, Label: r.label, Owner: owner, Sandbox: rec.ID, Template: rec.Template, Driver: rec.Driver,
		Kind: r.kind, Step: r.step, Created: s.opts.Now().UTC(), Roots: r.roots, NewBytes: max(after.Bytes-before.Bytes, 0),
		Busy: busy, Unsettled: capt.Unsettled, Note: snapshotNote,
	}, Entries: capt.Entries}
	snap.Summarize()
	if busy {
		snap.Note += "; taken while commands ran: each file is as it was at one moment, not all files at the same moment"
	}
	if len(capt.Unsettled) > 0 {
		snap.Note += "; some files kept changing while they were read (unsettled): their content may mix two moments"
	}
	if err := st.Put(ctx, snap); err != nil {
		return nil, fmt.Errorf("record snapshot of %s: %w", rec.ID, err)
	}
	s.m.SnapshotSeconds.Observe(time.Since(start).Seconds())
	s.recordAfter(ctx, audit.Event{Kind: audit.KindSnapshot, Key: c.KeyID, Sandbox: rec.ID, Template: rec.Template, Snapshot: snap.ID,
		Size: snap.Bytes, Reason: r.kind + snapName(snap.Name)})
	return snap, nil
}

func snapName(n string) string {
	if n == "" {
		return ""
	}
	return " " + strconv.Quote(n)
}

// snapshotError turns a driver's snapshot or restore error into what the
// caller may read: classes and messages about the sandbox's own files pass;
// anything else goes to the log.
func (s *Supervisor) snapshotError(id, what string, err error) error {
	switch {
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrLimit), errors.Is(err, sandbox.ErrUnsupported),
		errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrExists), errors.Is(err, sandbox.ErrMismatch):
		return fmt.Errorf("%s of sandbox %s: %w", what, id, err)
	case errors.Is(err, sandbox.ErrClosed):
		return fmt.Errorf("%s of sandbox %s: %w: %w", what, id, ErrNotRunning, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	s.log.Error(what+" failed", "sandbox_id", id, "err", err)
	return fmt.Errorf("%s of sandbox %s failed (the daemon's log has the details; the sandbox's files are as they were): %w", what, id, errDriver)
}

// ownerQuota is the quota of key id, as stored.
func (s *Supervisor) ownerQuota(id string) store.Quota {
	if k, err := s.store.GetKey(id); err == nil {
		return k.Quota.WithDefaults()
	}
	return store.Quota{}.WithDefaults()
}

// running counts l's processes that have not ended.
func (l *live) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.procs {
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}

// byName finds the snapshot of sandbox sb named name.
func (s *Supervisor) byName(ctx context.Context, owner, sb, name string) (snapshot.Info, error) {
	list, err := s.opts.Snapshots.List(ctx, owner)
	if err != nil {
		return snapshot.Info{}, err
	}
	for _, in := range list {
		if in.Sandbox == sb && in.Name == name {
			return in, nil
		}
	}
	return snapshot.Info{}, fmt.Errorf("%w: sandbox %s has no snapshot named %q (list them with GET /v1/sandboxes/%s/snapshots)", sandbox.ErrNotFound, sb, name, sb)
}

// resolveSnapshot finds the snapshot ref names for c: an id, or a name or
// "step-N" among sandbox sb's snapshots. Another key's snapshot is
// refused.
func (s *Supervisor) resolveSnapshot(ctx context.Context, c Caller, sb, ref string) (*snapshot.Snapshot, error) {
	if s.opts.Snapshots == nil {
		return nil, &sandbox.UnsupportedError{What: "snapshots", Why: "this daemon keeps no snapshot store", Fix: "run `airlock serve` with a data directory"}
	}
	id := ref
	if !snapshot.ValidID(ref) {
		if err := snapshot.CheckName(ref); err != nil {
			return nil, err
		}
		if sb == "" {
			return nil, fmt.Errorf("%w: snapshot %q: a name is looked up among one sandbox's snapshots; give the sandbox, or the snapshot's id (sn-…)", sandbox.ErrInvalid, ref)
		}
		owner := c.KeyID
		if c.Operator {
			if in, err := s.Get(ctx, c, sb); err == nil {
				owner = in.Owner
			}
		}
		in, err := s.byName(ctx, owner, sb, ref)
		if err != nil {
			return nil, err
		}
		id = in.ID
	}
	snap, err := s.opts.Snapshots.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if snap.Owner != c.KeyID && !c.Operator {
		return nil, fmt.Errorf("snapshot %s belongs to another key: %w", id, ErrForbidden)
	}
	return snap, nil
}

// ListSnapshots describes the snapshots c may see, oldest first: of
// sandbox sb when set.
func (s *Supervisor) ListSnapshots(ctx context.Context, c Caller, sb string) ([]snapshot.Info, error) {
	if s.opts.Snapshots == nil {
		return []snapshot.Info{}, nil
	}
	owner := c.KeyID
	if c.Operator {
		owner = ""
	}
	if sb != "" {
		if _, err := s.Get(ctx, c, sb); err != nil {
			return nil, err
		}
	}
	list, err := s.opts.Snapshots.List(ctx, owner)
	if err != nil {
		return nil, err
	}
	out := []snapshot.Info{}
	for _, in := range list {
		if sb == "" || in.Sandbox == sb {
			out = append(out, in)
		}
	}
	return out, nil
}

// GetSnapshot returns snapshot ref (an id, or a name of sandbox sb's).
func (s *Supervisor) GetSnapshot(ctx context.Context, c Caller, sb, ref string) (*snapshot.Snapshot, error) {
	return s.resolveSnapshot(ctx, c, sb, ref)
}

// DeleteSnapshot removes snapshot ref.
func (s *Supervisor) DeleteSnapshot(ctx context.Context, c Caller, sb, ref string) error {
	snap, err := s.resolveSnapshot(ctx, c, sb, ref)
	if err != nil {
		return err
	}
	if err := s.opts.Snapshots.Delete(ctx, snap.ID); err != nil {
		return err
	}
	s.recordAfter(ctx, audit.Event{Kind: audit.KindSnapshotDelete, Key: c.KeyID, Sandbox: snap.Sandbox, Snapshot: snap.ID})
	return nil
}

// RestoreRequest says what to restore: a snapshot, or the state before
// the last UndoSteps execs (checkpoints).
type RestoreRequest struct {
	Snapshot  string
	UndoSteps int
}

// RestoreResult says what a restore did.
type RestoreResult struct {
	Snapshot snapshot.Info
	Stats    sandbox.ApplyStats
}

// Restore makes sandbox id's trees exactly a snapshot's.
func (s *Supervisor) Restore(ctx context.Context, c Caller, id string, r RestoreRequest) (RestoreResult, error) {
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return RestoreResult{}, err
	}
	defer done()
	l, err := s.lookup(c, id)
	if err != nil {
		return RestoreResult{}, err
	}
	var snap *snapshot.Snapshot
	switch {
	case r.Snapshot != "" && r.UndoSteps != 0:
		return RestoreResult{}, fmt.Errorf("%w: give a snapshot or undo_steps, not both", sandbox.ErrInvalid)
	case r.UndoSteps < 0:
		return RestoreResult{}, fmt.Errorf("%w: undo_steps must be positive", sandbox.ErrInvalid)
	case r.UndoSteps > 0:
		snap, err = s.checkpointBefore(ctx, c, l, r.UndoSteps)
	case r.Snapshot == "":
		return RestoreResult{}, fmt.Errorf("%w: name the snapshot to restore (its id or name), or give undo_steps", sandbox.ErrInvalid)
	default:
		snap, err = s.resolveSnapshot(ctx, c, id, r.Snapshot)
	}
	if err != nil {
		return RestoreResult{}, err
	}
	stats, err := s.restore(ctx, c, l, snap, "restore")
	if err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Snapshot: snap.Info, Stats: stats}, nil
}

// restore applies snap to l. Another key's snapshot is refused.
func (s *Supervisor) restore(ctx context.Context, c Caller, l *live, snap *snapshot.Snapshot, why string) (sandbox.ApplyStats, error) {
	sn, err := s.snapshotter(l)
	if err != nil {
		return sandbox.ApplyStats{}, err
	}
	l.mu.Lock()
	rec := l.rec
	l.mu.Unlock()
	if snap.Owner != rec.Owner {
		return sandbox.ApplyStats{}, fmt.Errorf("snapshot %s belongs to another key than sandbox %s: %w", snap.ID, rec.ID, ErrForbidden)
	}
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	start := time.Now()
	st := s.opts.Snapshots
	stats, err := sn.Apply(ctx, sandbox.ApplyRequest{Roots: snap.Roots, Entries: snap.Entries}, func(ctx context.Context, d string) (io.ReadCloser, error) {
		return st.OpenBlob(ctx, snap.Owner, d)
	})
	ev := audit.Event{Kind: audit.KindRestore, Key: c.KeyID, Sandbox: rec.ID, Template: rec.Template, Snapshot: snap.ID, Reason: why}
	if err != nil {
		ev.Error = err.Error()
		s.recordAfter(ctx, ev)
		return stats, s.snapshotError(rec.ID, "restore", err)
	}
	s.m.RestoreSeconds.Observe(time.Since(start).Seconds())
	ev.Reason = fmt.Sprintf("%s: %d added, %d changed, %d removed", why, stats.Added, stats.Changed, stats.Removed)
	s.recordAfter(ctx, ev)
	return stats, nil
}

// DiffRequest says what to compare: From and To are snapshot ids or
// names, or "now" (the sandbox's files as they are); empty From means the
// sandbox's latest snapshot, empty To "now". Step, when set, compares
// checkpoint Step with the next one (or now): what that exec changed.
type DiffRequest struct {
	From, To string
	Step     int64
	// Limits cap the text diffs.
	Limits snapshot.DiffLimits
}

// Now names the current state in a diff.
const Now = "now"

// Diff compares two states of sandbox id's files.
func (s *Supervisor) Diff(ctx context.Context, c Caller, id string, r DiffRequest) (*snapshot.Diff, error) {
	ctx, done, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return nil, err
	}
	defer done()
	if r.Step < 0 {
		return nil, fmt.Errorf("%w: step must be positive", sandbox.ErrInvalid)
	}
	r.Limits = r.Limits.WithDefaults()
	if r.Step > 0 {
		if r.From != "" || r.To != "" {
			return nil, fmt.Errorf("%w: give a step, or from and to, not both", sandbox.ErrInvalid)
		}
		r.From, r.To = stepName(r.Step), Now
		if _, err := s.resolveSnapshot(ctx, c, id, stepName(r.Step+1)); err == nil {
			r.To = stepName(r.Step + 1)
		}
	}
	if r.From == "" {
		list, err := s.ListSnapshots(ctx, c, id)
		if err != nil {
			return nil, err
		}
		list = slices.DeleteFunc(list, func(in snapshot.Info) bool { return in.Kind == snapshot.KindPreExec })
		if len(list) == 0 {
			return nil, fmt.Errorf("%w: sandbox %s has no snapshot to compare with: take one first (airlock sandbox snapshot %s)", sandbox.ErrNotFound, id, id)
		}
		r.From = list[len(list)-1].ID
	}
	if r.To == "" {
		r.To = Now
	}
	var owner string
	states := [2]*snapshot.Snapshot{}
	var nowFiles sandbox.Files
	for i, ref := range []string{r.From, r.To} {
		if ref != Now {
			if states[i], err = s.resolveSnapshot(ctx, c, id, ref); err != nil {
				return nil, err
			}
			if owner != "" && states[i].Owner != owner {
				return nil, fmt.Errorf("%w: the two snapshots belong to different keys", ErrForbidden)
			}
			owner = states[i].Owner
			continue
		}
		l, err := s.lookup(c, id)
		if err != nil {
			return nil, err
		}
		sn, err := s.snapshotter(l)
		if err != nil {
			return nil, err
		}
		l.snapMu.Lock()
		capt, err := sn.Capture(ctx, sandbox.CaptureRequest{Roots: s.diffRoots(states[0]), Have: func(string) bool { return true }, MaxFiles: c.Quota.WithDefaults().MaxSnapshotFiles}, nil)
		l.snapMu.Unlock()
		if err != nil {
			return nil, s.snapshotError(id, "diff", err)
		}
		states[i] = &snapshot.Snapshot{Info: snapshot.Info{ID: Now, Roots: s.diffRoots(states[0])}, Entries: capt.Entries}
		nowFiles = l.inst.Files()
	}
	a, b := states[0], states[1]
	d := snapshot.Compare(a.ID, b.ID, restrict(a.Entries, b.Roots), restrict(b.Entries, a.Roots))
	st := s.opts.Snapshots
	open := func(ctx context.Context, e *sandbox.TreeEntry, after bool) (io.ReadCloser, error) {
		side := a
		if after {
			side = b
		}
		if side.ID == Now {
			pr, pw := io.Pipe()
			go func() {
				pw.CloseWithError(nowFiles.ReadFile(ctx, e.Path, 0, r.Limits.FileBytes+1, pw))
			}()
			return pr, nil
		}
		return st.OpenBlob(ctx, side.Owner, e.Digest)
	}
	if err := d.AddText(ctx, open, r.Limits); err != nil {
		return nil, s.snapshotError(id, "diff", err)
	}
	return d, nil
}

// diffRoots are the roots "now" is read for: those of the snapshot it is
// compared with.
func (s *Supervisor) diffRoots(other *snapshot.Snapshot) []string {
	if other != nil {
		return other.Roots
	}
	return []string{sandbox.Workspace}
}

// restrict keeps the entries below roots.
func restrict(entries []sandbox.TreeEntry, roots []string) []sandbox.TreeEntry {
	out := entries[:0:0]
	for _, e := range entries {
		for _, r := range roots {
			if e.Path == r || strings.HasPrefix(e.Path, r+"/") {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// ForkRequest asks for a new sandbox from a snapshot: the snapshot's
// template, with the lifetime and environment given.
type ForkRequest struct {
	// Sandbox, when set, is where a snapshot name is looked up.
	Sandbox  string
	Snapshot string
	TTL      time.Duration
	Env      []string
}

// ForkResult is the new sandbox, and what its restore did.
type ForkResult struct {
	Sandbox  Info
	Snapshot snapshot.Info
	Stats    sandbox.ApplyStats
}

// Fork makes a new sandbox from a snapshot of c's: same template, its own
// identity, the snapshot's files.
func (s *Supervisor) Fork(ctx context.Context, c Caller, r ForkRequest) (ForkResult, error) {
	snap, err := s.resolveSnapshot(ctx, c, r.Sandbox, r.Snapshot)
	if err != nil {
		return ForkResult{}, err
	}
	if snap.Owner != c.KeyID {
		return ForkResult{}, fmt.Errorf("snapshot %s belongs to another key: fork your own key's snapshots: %w", snap.ID, ErrForbidden)
	}
	in, err := s.Create(ctx, c, CreateRequest{Template: snap.Template, Driver: snap.Driver, TTL: r.TTL, Env: r.Env})
	if err != nil {
		return ForkResult{}, err
	}
	l, err := s.lookup(c, in.ID)
	if err == nil {
		var stats sandbox.ApplyStats
		stats, err = s.restore(ctx, c, l, snap, "fork of "+snap.ID)
		if err == nil {
			s.recordAfter(ctx, audit.Event{Kind: audit.KindFork, Key: c.KeyID, Sandbox: in.ID, Template: in.Template, Snapshot: snap.ID, Reason: "forked from sandbox " + snap.Sandbox})
			return ForkResult{Sandbox: s.info(l), Snapshot: snap.Info, Stats: stats}, nil
		}
	}
	_ = s.Kill(context.WithoutCancel(ctx), c, in.ID)
	return ForkResult{}, fmt.Errorf("fork of snapshot %s: %w", snap.ID, err)
}
