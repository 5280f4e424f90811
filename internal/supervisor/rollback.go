package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Transactional execs and checkpoints.
//
// An exec that asks for rollback on failure gets a snapshot of /workspace
// first; when it fails (a non-zero exit, a signal, any limit hit) the
// workspace is restored to that snapshot, and its result says what was
// undone. A sandbox created with checkpoints N takes such a snapshot
// before every exec ("step-K", K counting its execs from 1) and keeps the
// last N: checkpoint K is the workspace before step K, so what step K
// changed is the diff from step-K to step-K+1 (or now), and undoing the
// last n steps restores step-(L-n+1), L being the last step.

// maxCheckpoints bounds the checkpoints a sandbox keeps.
const maxCheckpoints = 64

func stepName(n int64) string { return "step-" + strconv.FormatInt(n, 10) }

// rollbackTimeout bounds a rollback after its exec ended, whatever the
// caller does meanwhile.
const rollbackTimeout = 2 * time.Minute

// execTxn is what an exec took before it ran.
type execTxn struct {
	snap     *snapshot.Snapshot
	rollback bool
	// exec is the exec's id once it started; a rollback's is in the
	// sandbox's record (store.Sandbox.Transactions) until it settles.
	exec string
}

// recordTxn writes down tx, the rollback of exec, in l's record, so that
// the next daemon can finish it when the exec outlives this one.
func (s *Supervisor) recordTxn(l *live, tx *execTxn, exec string) {
	if tx == nil || !tx.rollback {
		return
	}
	tx.exec = exec
	if _, err := s.store.UpdateSandbox(l.rec.ID, func(r *store.Sandbox) error {
		if r.Transactions == nil {
			r.Transactions = map[string]string{}
		}
		r.Transactions[exec] = tx.snap.ID
		return nil
	}); err != nil {
		s.log.Warn("record a transactional exec", "sandbox_id", l.rec.ID, "exec", exec, "err", err)
	}
}

// settleTxn removes exec's transaction from l's record.
func (s *Supervisor) settleTxn(l *live, exec string) {
	if _, err := s.store.UpdateSandbox(l.rec.ID, func(r *store.Sandbox) error {
		delete(r.Transactions, exec)
		return nil
	}); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Warn("settle a transactional exec", "sandbox_id", l.rec.ID, "exec", exec, "err", err)
	}
}

// beforeExec takes the snapshot an exec needs before it runs: for its
// rollback, or as the sandbox's checkpoint. Nil when it needs none. A
// rollback that cannot have its snapshot refuses the exec; a checkpoint
// that fails is logged and the exec runs.
func (s *Supervisor) beforeExec(ctx context.Context, c Caller, l *live, mode sandbox.RollbackMode) (*execTxn, error) {
	l.mu.Lock()
	keep, id := l.rec.Checkpoints, l.rec.ID
	l.mu.Unlock()
	rollback := mode == sandbox.RollbackOnFailure
	if !rollback && keep <= 0 {
		return nil, nil
	}
	tr := takeRequest{kind: snapshot.KindPreExec, roots: []string{sandbox.Workspace}}
	if keep > 0 {
		step := l.step.Add(1)
		tr.kind, tr.step, tr.name = snapshot.KindCheckpoint, step, stepName(step)
	}
	snap, err := s.take(ctx, c, l, tr)
	if err != nil {
		if rollback {
			return nil, fmt.Errorf("rollback on_failure needs a snapshot of the workspace before the exec, and it failed (the exec did not run): %w", err)
		}
		s.log.Warn("checkpoint before an exec failed", "sandbox_id", id, "err", err)
		return nil, nil
	}
	if keep > 0 {
		s.pruneCheckpoints(ctx, snap.Owner, id, keep)
	}
	return &execTxn{snap: snap, rollback: rollback}, nil
}

// failed says why res is a failure for a rollback, or "".
func failed(res *sandbox.Result) string {
	switch {
	case len(res.LimitsHit) > 0:
		return "limit " + string(res.LimitsHit[0]) + " hit"
	case res.Signal != "":
		return "killed by " + res.Signal
	case res.Reason != sandbox.ReasonExit && res.Reason != "":
		return "ended: " + string(res.Reason)
	case res.ExitCode != 0:
		return "exit code " + strconv.Itoa(res.ExitCode)
	}
	return ""
}

// afterExec rolls the workspace back when the exec failed and asked for
// it, says so in res, and drops a snapshot taken only for the rollback.
func (s *Supervisor) afterExec(c Caller, l *live, tx *execTxn, res *sandbox.Result, err error) {
	if tx == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if errors.Is(err, sandbox.ErrDetached) {
		// This daemon let go of the sandbox and the exec runs on: the
		// next daemon finishes its transaction (see reattachProcs),
		// with the snapshot and the record left as they are.
		return
	}
	if tx.exec != "" {
		defer s.settleTxn(l, tx.exec)
	}
	if tx.rollback {
		why := failed(res)
		if err != nil {
			why = "airlock lost the exec"
		}
		rb := &sandbox.Rollback{Snapshot: tx.snap.ID, Why: why}
		if why != "" {
			stats, rerr := s.restore(ctx, c, l, tx.snap, "rollback of a failed exec ("+why+")")
			if rerr != nil {
				rb.Error = rerr.Error()
			} else {
				rb.RolledBack = true
				// What the restore undid, seen from the exec: files it
				// added were removed, and so on.
				rb.Added, rb.Changed, rb.Removed = stats.Removed, stats.Changed, stats.Added
			}
		}
		res.Rollback = rb
		if rb.RolledBack {
			msg := "the workspace was rolled back to its state before the exec (" + why + ")"
			if res.Message != "" {
				res.Message += "; " + msg
			} else {
				res.Message = msg
			}
		}
	}
	if tx.snap.Kind == snapshot.KindPreExec {
		if derr := s.opts.Snapshots.Delete(ctx, tx.snap.ID); derr != nil {
			s.log.Warn("drop the snapshot of a transactional exec", "snapshot", tx.snap.ID, "err", derr)
		}
	}
}

// pruneCheckpoints keeps the last keep checkpoints of sandbox id.
func (s *Supervisor) pruneCheckpoints(ctx context.Context, owner, id string, keep int) {
	cps := s.checkpoints(ctx, owner, id)
	for len(cps) > keep {
		if err := s.opts.Snapshots.Delete(ctx, cps[0].ID); err != nil {
			s.log.Warn("drop an old checkpoint", "sandbox_id", id, "snapshot", cps[0].ID, "err", err)
		}
		cps = cps[1:]
	}
}

// checkpoints lists sandbox id's checkpoints, oldest step first.
func (s *Supervisor) checkpoints(ctx context.Context, owner, id string) []snapshot.Info {
	list, err := s.opts.Snapshots.List(ctx, owner)
	if err != nil {
		return nil
	}
	list = slices.DeleteFunc(list, func(in snapshot.Info) bool { return in.Sandbox != id || in.Kind != snapshot.KindCheckpoint })
	slices.SortFunc(list, func(a, b snapshot.Info) int { return int(a.Step - b.Step) })
	return list
}

// checkpointBefore returns the checkpoint before the last n steps of l.
func (s *Supervisor) checkpointBefore(ctx context.Context, c Caller, l *live, n int) (*snapshot.Snapshot, error) {
	l.mu.Lock()
	owner, id, keep := l.rec.Owner, l.rec.ID, l.rec.Checkpoints
	l.mu.Unlock()
	if keep <= 0 {
		return nil, fmt.Errorf("%w: sandbox %s keeps no checkpoints: create it with checkpoints (the number of steps to keep) to undo steps", sandbox.ErrInvalid, id)
	}
	if s.opts.Snapshots == nil {
		return nil, &sandbox.UnsupportedError{What: "snapshots", Why: "this daemon keeps no snapshot store"}
	}
	last := l.step.Load()
	want := last - int64(n) + 1
	if want < 1 {
		return nil, fmt.Errorf("%w: sandbox %s has run %d steps; it cannot undo %d", sandbox.ErrInvalid, id, last, n)
	}
	for _, cp := range s.checkpoints(ctx, owner, id) {
		if cp.Step == want {
			return s.resolveSnapshot(ctx, c, id, cp.ID)
		}
	}
	return nil, fmt.Errorf("%w: the checkpoint before step %d is gone: sandbox %s keeps its last %d", sandbox.ErrNotFound, want, id, keep)
}

// dropCheckpoints removes the checkpoints and transactional snapshots of
// a sandbox that ended; its named snapshots stay.
func (s *Supervisor) dropCheckpoints(ctx context.Context, owner, id string) {
	if s.opts.Snapshots == nil || owner == "" {
		return
	}
	list, err := s.opts.Snapshots.List(ctx, owner)
	if err != nil {
		return
	}
	for _, in := range list {
		if in.Sandbox == id && (in.Kind == snapshot.KindCheckpoint || in.Kind == snapshot.KindPreExec) {
			_ = s.opts.Snapshots.Delete(ctx, in.ID)
		}
	}
}

// resumeSnapshots takes up the snapshots of l, a sandbox reattached after a
// restart of the daemon: its step count goes on from its last checkpoint,
// and the snapshots of transactional execs that no record names go (those
// of a daemon killed between the snapshot and the exec's start).
func (s *Supervisor) resumeSnapshots(ctx context.Context, l *live) {
	if s.opts.Snapshots == nil || l.owner == "" {
		return
	}
	list, err := s.opts.Snapshots.List(ctx, l.owner)
	if err != nil {
		s.log.Warn("list the snapshots of a reattached sandbox", "sandbox_id", l.rec.ID, "err", err)
		return
	}
	kept := map[string]bool{}
	for _, snap := range l.rec.Transactions {
		kept[snap] = true
	}
	for _, in := range list {
		switch {
		case in.Sandbox != l.rec.ID:
		case in.Kind == snapshot.KindCheckpoint:
			if in.Step > l.step.Load() {
				l.step.Store(in.Step)
			}
		case in.Kind == snapshot.KindPreExec && !kept[in.ID]:
			if err := s.opts.Snapshots.Delete(ctx, in.ID); err != nil {
				s.log.Warn("drop the snapshot of a transactional exec the previous daemon left", "sandbox_id", l.rec.ID, "snapshot", in.ID, "err", err)
			}
		}
	}
}
