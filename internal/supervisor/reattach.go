package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/ring"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds what lets sandboxes outlive the daemon: reattaching to
// them on start (Recover), letting go of them on a clean stop (Detach),
// ending them all offline (Reap), and keeping each sandbox's last use on
// disk so that its idle timeout goes on across a restart.

// ReattachTimeout bounds reattaching to one sandbox: a sandbox whose holder
// does not answer within it is ended and recorded as lost.
const ReattachTimeout = 2 * time.Second

// reattachParallel is how many sandboxes are reattached at once.
const reattachParallel = 64

// RecoverReport says what Recover found.
type RecoverReport struct {
	// Reattached lists the sandboxes that run on, as they were.
	Reattached []string
	// Mismatched lists those of them whose agent speaks another protocol
	// version: they run until their TTL, and only end.
	Mismatched []string
	// Expired lists the sandboxes whose TTL passed while no daemon ran:
	// they are destroyed.
	Expired []string
	// Lost lists the sandboxes that could not be reattached (whatever held
	// them had died, or did not answer, or they were still being made):
	// what was left of them is removed, and they are recorded as lost.
	Lost []string
	// Reaped lists the drivers whose orphans were swept.
	Reaped []string
}

// lostReason is the end reason of sandboxes found dead on start.
const lostReason = "lost"

// outcome is what became of one sandbox on start.
type outcome int

const (
	outReattached outcome = iota
	outMismatched
	outExpired
	outLost
)

// Recover runs before the daemon serves: every sandbox the registry holds
// as live belonged to a daemon before this one. Each one whose holder
// still runs is reattached (within ReattachTimeout each, many at once) and
// comes back as it was: running or pooled, its TTL and idle timeout going
// on from where they were (the time no daemon ran counts), its processes
// followable again. One whose TTL passed meanwhile is destroyed; one whose
// holder is gone, or does not answer, is recorded as lost and what is left
// of it removed. Then each driver sweeps what dead sandboxes left.
func (s *Supervisor) Recover(ctx context.Context) (RecoverReport, error) {
	start := time.Now()
	rep, err := s.each(ctx, func(ctx context.Context, rec store.Sandbox) outcome { return s.recoverOne(ctx, rec) })
	if err != nil {
		return rep, err
	}
	rep.Reaped = s.sweep(ctx)
	s.log.Info("recovered", "reattached", len(rep.Reattached), "mismatched", len(rep.Mismatched), "expired", len(rep.Expired),
		"lost", len(rep.Lost), "reaped_drivers", rep.Reaped, "took", time.Since(start).Round(time.Millisecond))
	return rep, nil
}

// Reap ends every sandbox the registry holds as live, whichever daemon
// made it and whatever its agent's version: what `airlock reap` does while
// no daemon runs. Those that cannot be reattached are recorded as lost
// and what is left of them removed, as Recover does. Reap is Recover
// followed by an end of each reattached sandbox, with reason "reaped".
func (s *Supervisor) Reap(ctx context.Context) (RecoverReport, error) {
	rep, err := s.each(ctx, func(ctx context.Context, rec store.Sandbox) outcome {
		o := s.recoverOne(ctx, rec)
		if o == outReattached || o == outMismatched {
			s.mu.Lock()
			l := s.live[rec.ID]
			s.mu.Unlock()
			if l != nil {
				s.end(l, "reaped", "ended by airlock reap")
			}
		}
		return o
	})
	if err != nil {
		return rep, err
	}
	rep.Reaped = s.sweep(ctx)
	return rep, nil
}

// each runs fn on every live record, many at once, and sorts the outcomes.
// A take-up from the object store the previous daemon began is finished
// or undone first (finishTake).
func (s *Supervisor) each(ctx context.Context, fn func(context.Context, store.Sandbox) outcome) (RecoverReport, error) {
	var rep RecoverReport
	recs, err := s.store.Sandboxes(func(r *store.Sandbox) bool { return r.State.Live() })
	if err != nil {
		return rep, fmt.Errorf("recover: %w", err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, reattachParallel)
	for _, rec := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if rec.Taking != nil {
				rec = s.finishTake(ctx, rec)
			}
			o := fn(ctx, rec)
			mu.Lock()
			defer mu.Unlock()
			switch o {
			case outReattached:
				rep.Reattached = append(rep.Reattached, rec.ID)
			case outMismatched:
				rep.Reattached = append(rep.Reattached, rec.ID)
				rep.Mismatched = append(rep.Mismatched, rec.ID)
			case outExpired:
				rep.Expired = append(rep.Expired, rec.ID)
			case outLost:
				rep.Lost = append(rep.Lost, rec.ID)
			}
		}()
	}
	wg.Wait()
	return rep, nil
}

// recoverOne reattaches to the sandbox of rec, or ends it.
func (s *Supervisor) recoverOne(ctx context.Context, rec store.Sandbox) outcome {
	if rec.State == store.StatePaused {
		return s.keepPaused(ctx, rec)
	}
	if rec.State == store.StateRunning && rec.Paused != nil && rec.Paused.Pending {
		return s.finishPause(ctx, rec)
	}
	drv := s.opts.Drivers[rec.Driver]
	rc, ok := drv.(sandbox.Recoverer)
	switch {
	case drv == nil:
		return s.lost(ctx, rec, fmt.Sprintf("its driver %s is not in this daemon; what is left of it stays until a daemon with that driver sweeps it", rec.Driver))
	case !ok || !drv.Capabilities().SurvivesRestart:
		return s.lost(ctx, rec, "its driver's sandboxes do not outlive the daemon that made them; it ended with the previous daemon, and every exec and process it ran with it")
	case len(rec.DriverState) == 0 && rec.State != store.StateCreating:
		return s.lost(ctx, rec, "the previous daemon kept nothing to reattach to it with; it was ended")
	}
	rctx, cancel := context.WithTimeout(ctx, ReattachTimeout)
	inst, err := rc.Recover(rctx, rec.ID, rec.DriverState)
	cancel()
	if err != nil {
		why := "it could not be reattached, and was ended: " + err.Error()
		if errors.Is(err, sandbox.ErrNotFound) {
			if reason, why := endedByHolder(rec, s.store.Activity(rec.ID), s.opts.Now()); reason != "" {
				s.ended(ctx, rec, reason, why)
				return outExpired
			}
			why = "what held it had exited since the previous daemon stopped: " + err.Error()
		}
		return s.lost(ctx, rec, why)
	}
	now := s.opts.Now()
	closeWith := func(reason string) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := inst.Close(cctx); err != nil {
			s.log.Warn("close sandbox", "sandbox_id", rec.ID, "err", err)
		}
		s.log.Info("sandbox ended on start", "sandbox_id", rec.ID, "reason", reason)
	}
	protocol, compatible := agentProtocol(inst)
	switch {
	case rec.State == store.StateCreating:
		closeWith("it was being made when the previous daemon stopped")
		return s.lost(ctx, rec, "it was being made when the previous daemon stopped; its create never answered, and it was ended")
	case rec.State == store.StateRunning && !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt):
		closeWith("ttl")
		s.ended(ctx, rec, "ttl", "its time to live ran out while no daemon ran")
		return outExpired
	case rec.State == store.StatePooled && (!compatible || s.pools[rec.Template] == nil):
		closeWith("pooled")
		s.ended(ctx, rec, "shutdown", "a pooled sandbox that this daemon's pools do not take (its template has no pool, or its agent speaks another protocol)")
		return outExpired
	}
	l := &live{rec: rec, owner: rec.Owner, mem: s.memoryOf(rec), fds: s.descriptorsOf(rec), procs: map[string]*proc{}, inst: inst}
	s.holdImage(l)
	last := s.store.Activity(rec.ID)
	if last.IsZero() {
		last = rec.Created
	}
	l.touch(last)
	l.flushed.Store(last.UnixNano())
	if rec.AgentProtocol == 0 && protocol != 0 {
		l.rec.AgentProtocol = protocol
	}
	s.resumeSnapshots(ctx, l)
	if !compatible {
		l.mismatch = fmt.Sprintf("its agent speaks protocol %d, which this daemon does not: it runs until its time to live ends; delete it, or end it with `airlock reap` while no daemon runs", protocol)
		s.log.Warn("sandbox made by an airlock of another protocol version: it runs until its TTL, and only ends", "sandbox_id", rec.ID,
			"agent_protocol", protocol, "expires_at", rec.ExpiresAt)
	}
	s.mu.Lock()
	s.live[rec.ID] = l
	if p := s.pools[rec.Template]; p != nil && rec.State == store.StatePooled {
		p.ready = append(p.ready, rec.ID)
	}
	s.mu.Unlock()
	s.m.Live.WithLabelValues(rec.Driver).Inc()
	s.wg.Add(1)
	go s.watch(l, inst)
	if compatible {
		s.tellLifetime(ctx, l)
		s.reattachProcs(ctx, l)
	}
	s.recordAfter(ctx, audit.Event{Kind: audit.KindReattach, Key: rec.Owner, Sandbox: rec.ID, Template: rec.Template,
		Reason: "reattached after a restart of the daemon"})
	s.log.Info("sandbox reattached", "sandbox_id", rec.ID, "state", rec.State, "owner", rec.Owner, "agent_protocol", protocol)
	if !compatible {
		return outMismatched
	}
	return outReattached
}

// lost records rec as lost, with why.
func (s *Supervisor) lost(ctx context.Context, rec store.Sandbox, why string) outcome {
	now := s.opts.Now().UTC()
	if _, err := s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error {
		r.State, r.Ended, r.EndReason, r.EndMessage = store.StateLost, now, lostReason, why
		return nil
	}); err != nil {
		s.log.Error("record a lost sandbox", "sandbox_id", rec.ID, "err", err)
	}
	// A pause image of a pause the previous daemon did not finish.
	_ = os.RemoveAll(s.pausedDir(rec.ID))
	s.dropCheckpoints(ctx, rec.Owner, rec.ID)
	s.m.Kills.WithLabelValues(lostReason).Inc()
	s.log.Warn("sandbox lost with the previous daemon", "sandbox_id", rec.ID, "owner", rec.Owner, "why", why)
	// Every sandbox that ends leaves an audit event, these too.
	s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: rec.Owner, Sandbox: rec.ID, Template: rec.Template,
		Reason: lostReason + ": " + why})
	return outLost
}

// ended records rec, which this daemon never took up, as destroyed.
func (s *Supervisor) ended(ctx context.Context, rec store.Sandbox, reason, why string) {
	now := s.opts.Now().UTC()
	if _, err := s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error {
		r.State, r.Ended, r.EndReason, r.EndMessage = store.StateDestroyed, now, reason, why
		return nil
	}); err != nil {
		s.log.Error("record the end of a sandbox", "sandbox_id", rec.ID, "err", err)
	}
	s.dropCheckpoints(ctx, rec.Owner, rec.ID)
	s.m.Kills.WithLabelValues(reason).Inc()
	s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: rec.Owner, Sandbox: rec.ID, Template: rec.Template, Reason: reason + ": " + why})
	s.log.Info("sandbox destroyed", "sandbox_id", rec.ID, "reason", reason, "why", why)
}

// reattachProcs takes up the processes of l's sandbox that ran on across
// the restart, or ended without the previous daemon collecting their
// result: each is a process of l again, followable, with its output from
// what the sandbox kept of it, and its result recorded when it ends.
func (s *Supervisor) reattachProcs(ctx context.Context, l *live) {
	pa, ok := l.inst.(sandbox.ProcessAttacher)
	if !ok {
		return
	}
	states, err := pa.Processes(ctx)
	if err != nil {
		s.log.Warn("list the processes of a reattached sandbox", "sandbox_id", l.rec.ID, "err", err)
		return
	}
	size := s.outputBuffer(l)
	c := Caller{KeyID: l.owner}
	seen := map[string]bool{}
	for _, st := range states {
		p := &proc{id: st.ID, argv: st.Argv, started: st.Started, background: st.Background, out: ring.New(size), done: make(chan struct{})}
		if st.PTY != nil {
			sz := *st.PTY
			p.pty = &sz
		} else {
			p.errOut = ring.New(size)
		}
		w := s.procWriters(p, nil, nil)
		req := sandbox.AttachRequest{Stdout: w.out, Offsets: func(out, errOut int64) {
			p.out.Skip(out)
			if p.errOut != nil {
				p.errOut.Skip(errOut)
			}
		}}
		if w.err != nil {
			req.Stderr = w.err
		}
		if st.Stdin {
			p.stdin = newStdinQueue(nil)
			req.Stdin = p.stdin
		}
		sp, err := pa.Attach(ctx, st.ID, req)
		if err != nil {
			s.log.Warn("attach to a process of a reattached sandbox", "sandbox_id", l.rec.ID, "process", st.ID, "err", err)
			continue
		}
		p.p = sp
		l.mu.Lock()
		l.procs[p.id] = p
		l.mu.Unlock()
		pr := l.request(policy.Request{Action: policy.ActionExec, Argv: st.Argv})
		go s.track(l, c, pr, p, sp, w, s.resumeTxn(ctx, l, st.ID)) //nolint:gosec // the process outlives the reattach that found it
		seen[st.ID] = true
	}
	// Transactions of execs the sandbox no longer knows: nothing left to
	// roll back for.
	for exec, snap := range l.rec.Transactions {
		if !seen[exec] {
			s.settleTxn(l, exec)
			s.dropTxnSnapshot(ctx, l, snap)
		}
	}
}

// resumeTxn is the transaction of exec, a process of l that outlived the
// previous daemon, or nil.
func (s *Supervisor) resumeTxn(ctx context.Context, l *live, exec string) *execTxn {
	id, ok := l.rec.Transactions[exec]
	if !ok || s.opts.Snapshots == nil {
		return nil
	}
	snap, err := s.opts.Snapshots.Get(ctx, id)
	if err != nil {
		s.log.Warn("the snapshot of a transactional exec that outlived the previous daemon is gone: it will not be rolled back", "sandbox_id", l.rec.ID, "exec", exec, "snapshot", id, "err", err)
		s.settleTxn(l, exec)
		return nil
	}
	return &execTxn{snap: snap, rollback: true, exec: exec}
}

// dropTxnSnapshot deletes snapshot id if it was taken only for a rollback.
func (s *Supervisor) dropTxnSnapshot(ctx context.Context, l *live, id string) {
	if s.opts.Snapshots == nil {
		return
	}
	if in, err := s.opts.Snapshots.Get(ctx, id); err == nil && in.Kind == snapshot.KindPreExec && in.Sandbox == l.rec.ID {
		_ = s.opts.Snapshots.Delete(ctx, id)
	}
}

// Detach lets go of every sandbox without ending it, for a clean stop of
// the daemon: the reaper and the pools stop, each sandbox's last use is
// written down, and each sandbox whose driver survives a restart is let go
// of (sandbox.Detacher), to be reattached by the next daemon; the others
// are destroyed (reason "shutdown"), as Close does.
func (s *Supervisor) Detach(ctx context.Context) error {
	s.stopped.Do(func() { close(s.stop) })
	s.flushActivity()
	s.mu.Lock()
	ls := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		l.mu.Lock()
		inst, drv := l.inst, l.rec.Driver
		if inst == nil {
			// Still being made: its create ends it (see start).
			l.ending = true
		}
		l.mu.Unlock()
		if inst == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, ok := inst.(sandbox.Detacher)
			if !ok || !s.opts.Drivers[drv].Capabilities().SurvivesRestart {
				s.end(l, "shutdown", "the daemon stopped, and this driver's sandboxes do not outlive it")
				return
			}
			if err := d.Detach(ctx); err != nil {
				s.log.Warn("let go of a sandbox", "sandbox_id", l.rec.ID, "err", err)
			}
		}()
	}
	wg.Wait()
	s.wg.Wait()
	s.log.Info("let go of the sandboxes; they run on", "count", len(ls))
	return nil
}

// flushActivity writes down when each live sandbox was last used, for
// those used since the last time.
func (s *Supervisor) flushActivity() {
	s.mu.Lock()
	batch := map[string]time.Time{}
	var ls []*live
	for id, l := range s.live {
		if at := l.lastActive.Load(); at != l.flushed.Load() {
			batch[id] = time.Unix(0, at)
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	if err := s.store.SetActivity(batch); err != nil {
		s.log.Warn("record when sandboxes were last used", "err", err)
		return
	}
	for _, l := range ls {
		l.flushed.Store(batch[l.rec.ID].UnixNano())
	}
}

// expireProcs forgets l's processes that ended more than endedKeep ago.
func (l *live) expireProcs(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.finished) > 0 {
		p := l.procs[l.finished[0]]
		if p != nil && now.Sub(p.ended) < endedKeep {
			return
		}
		if p != nil {
			l.finishedBytes -= p.kept()
			delete(l.procs, p.id)
		}
		l.finished = l.finished[1:]
	}
}

// endedKeep is how long an ended process (and its result) stays readable.
const endedKeep = time.Hour
