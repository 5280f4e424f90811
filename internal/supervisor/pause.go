package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds pause and resume (sandbox.Pauser, sandbox.Freezer): a
// paused sandbox stays among the live ones, without an instance, its
// record in state paused. Its TTL and idle timeout wait; its paused TTL
// (the template's paused_ttl) runs. A driver's pause image lives in the
// state directory's paused/ID, each file's digest on record, checked
// before a resume.

// pauseTimeout bounds a pause or a resume.
const pauseTimeout = 10 * time.Minute

// pausedDir is where sandbox id's pause image lives.
func (s *Supervisor) pausedDir(id string) string {
	return filepath.Join(s.cfg.StateDir, "paused", id)
}

// Pause pauses sandbox id: its driver saves its processes and memory to
// the daemon's disk and ends them (or, where it declares
// memory_kept_in_host, freezes them where they are). A driver without
// pause is refused with its reason (ErrUnsupported); a sandbox with a
// foreground exec or a file transfer in flight is refused (ErrBusy).
// On a failure the sandbox runs on.
func (s *Supervisor) Pause(ctx context.Context, c Caller, id string) (Info, error) {
	l, err := s.lookupAsIs(c, id)
	if err != nil {
		return Info{}, err
	}
	l.mu.Lock()
	rec, inst := l.rec, l.inst
	l.mu.Unlock()
	drv := s.opts.Drivers[rec.Driver]
	caps := drv.Capabilities()
	if err := caps.CheckPause(rec.Driver); err != nil {
		return Info{}, err
	}
	if l.mismatch != "" {
		return Info{}, fmt.Errorf("sandbox %s: %w: %s", id, ErrNotRunning, l.mismatch)
	}
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	if n := l.busy.Load(); n > 0 {
		return Info{}, fmt.Errorf("%w: sandbox %s has %d foreground execs or file transfers in flight: pause it once they end", ErrBusy, id, n)
	}
	ctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	now := s.opts.Now()
	p := &store.Paused{At: now.UTC(), Until: now.Add(time.Duration(s.templates[rec.Template].PausedTTL)).UTC()}
	if !rec.ExpiresAt.IsZero() {
		p.TTLLeft = ttlLeft(rec, now)
	}
	started := time.Now()
	pauser, ok := drv.(sandbox.Pauser)
	switch fr, frozen := inst.(sandbox.Freezer); {
	case caps.MemoryKeptInHost && frozen:
		if err := fr.Freeze(ctx); err != nil {
			return Info{}, fmt.Errorf("pause sandbox %s: %w", id, err)
		}
		p.MemoryKept = true
	case ok:
		pausing := make(chan struct{})
		l.mu.Lock()
		l.pausing = pausing
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.pausing = nil
			l.mu.Unlock()
			close(pausing)
		}()
		if err := s.checkStored(ctx, rec.Owner, id, 0); err != nil {
			return Info{}, err
		}
		dir := s.pausedDir(id)
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Info{}, fmt.Errorf("pause sandbox %s: make its image's directory: %w", id, err)
		}
		// A daemon that dies from here on leaves the record saying so:
		// the next one finds the sandbox running, or saved (recoverOne).
		pending := *p
		pending.Pending = true
		if _, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.Paused = &pending; return nil }); err != nil {
			return Info{}, fmt.Errorf("record the pause of sandbox %s: %w", id, err)
		}
		state, back, err := pauser.Pause(ctx, inst, dir)
		if err != nil {
			full := diskFull(id, dir, err)
			_, _ = s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.Paused = nil; return nil })
			_ = os.RemoveAll(dir)
			s.pauseFailed(l, inst, back)
			if full != nil {
				s.log.Error("pause sandbox", "sandbox_id", id, "err", err)
				return Info{}, full
			}
			return Info{}, s.pauseError(id, err)
		}
		p.DriverState = state
		if p.Digests, p.Bytes, err = digestDir(dir); err != nil {
			err = fmt.Errorf("read its image back: %w", err)
		} else {
			err = s.checkStored(ctx, rec.Owner, id, p.Bytes)
		}
		if st, ok := pauser.(sandbox.PauseSettler); ok {
			st.SettlePause(id) // the sandbox holds nothing on the host from here on
		}
		if ps := s.pausedStore(); err == nil && ps != nil {
			if err = s.storePause(ctx, ps, rec, p, dir); err != nil {
				s.log.Error("store a pause image in the object store", "sandbox_id", id, "err", err)
				err = fmt.Errorf("store its image in %s: %w", ps.Where(), err)
			}
		}
		if err != nil {
			// The image cannot be vouched for: bring the sandbox back.
			if in2, rerr := pauser.Resume(context.WithoutCancel(ctx), id, state, dir); rerr == nil {
				s.pauseFailed(l, inst, in2)
			} else {
				s.pauseFailed(l, inst, nil)
			}
			_ = os.RemoveAll(dir)
			_, _ = s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.Paused = nil; return nil })
			if errors.Is(err, ErrQuota) {
				return Info{}, err
			}
			return Info{}, fmt.Errorf("pause sandbox %s: %w; it runs on", id, err)
		}
	default:
		return Info{}, caps.CheckPause("") // unreachable: a driver with pause is one or the other
	}
	rec, err = s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.State, r.Paused = store.StatePaused, p
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("record sandbox %s paused: %w", id, err)
	}
	s.mu.Lock()
	l.mu.Lock()
	l.rec = rec
	if !p.MemoryKept {
		l.inst, l.mem = nil, 0
	}
	l.mu.Unlock()
	s.mu.Unlock()
	if !p.MemoryKept {
		s.m.Live.WithLabelValues(rec.Driver).Dec()
	}
	how := fmt.Sprintf("saved, %d bytes, in %v", p.Bytes, time.Since(started).Round(time.Millisecond))
	if p.MemoryKept {
		how = "frozen, its memory kept in the host"
	}
	if ls, ok := inst.(sandbox.LifetimeSetter); ok && p.MemoryKept {
		// A frozen sandbox's holder runs on, and would end it at its TTL
		// or idle timeout: it is kept until the paused TTL instead.
		var left time.Duration
		if !p.Until.IsZero() {
			left = max(p.Until.Sub(now), time.Millisecond)
		}
		if err := ls.SetLifetime(ctx, left, 0, 0); err != nil {
			s.log.Warn("tell a paused sandbox's holder its lifetime", "sandbox_id", id, "err", err)
		}
	}
	s.recordAfter(ctx, audit.Event{Kind: audit.KindPause, Key: c.KeyID, Sandbox: id, Reason: how})
	s.log.Info("sandbox paused", "sandbox_id", id, "how", how)
	return s.info(l), nil
}

// pauseFailed puts back, where a driver's pause failed, the instance the
// sandbox runs on (back), or ends it when it was lost.
func (s *Supervisor) pauseFailed(l *live, old, back sandbox.Instance) {
	if back == old {
		return
	}
	if back == nil {
		s.end(l, "error", "it was lost while being paused")
		return
	}
	l.mu.Lock()
	l.inst = back
	l.mu.Unlock()
	s.wg.Add(1)
	go s.watch(l, back)
	s.reattachProcs(context.Background(), l)
}

// pauseError is what a caller may read of a driver's failure to pause.
func (s *Supervisor) pauseError(id string, err error) error {
	var ue *sandbox.UnsupportedError
	if errors.As(err, &ue) || errors.Is(err, sandbox.ErrLimit) {
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	s.log.Error("pause sandbox", "sandbox_id", id, "err", err)
	return fmt.Errorf("pause sandbox %s: the driver failed, and it runs on (the daemon's log has the details): %w", id, errDriver)
}

// Resume brings paused sandbox id back where it stopped. Resuming a
// running sandbox is not an error. Its pause image is checked against the
// digests on record first: one changed or cut short is refused
// (ErrInvalid) and left as it is.
func (s *Supervisor) Resume(ctx context.Context, c Caller, id string) (Info, error) {
	if !sandbox.ValidID(id) {
		return Info{}, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	checked := false // its image was checked as it was downloaded
	if l == nil {
		var err error
		if l, err = s.adoptPaused(ctx, c, id); err != nil {
			return Info{}, err
		}
		if l == nil {
			_, err = s.lookupAsIs(c, id)
			return Info{}, err
		}
		checked = true
		s.step("adopted")
	}
	l.mu.Lock()
	rec, inst, ending := l.rec, l.inst, l.ending
	l.mu.Unlock()
	if err := allowed(c, rec); err != nil {
		return Info{}, err
	}
	if ending {
		return Info{}, fmt.Errorf("sandbox %s is ending: %w", id, ErrNotRunning)
	}
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	rec = l.rec
	l.mu.Unlock()
	if rec.State != store.StatePaused || rec.Paused == nil {
		return s.Get(ctx, c, id)
	}
	ctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	p := rec.Paused
	started := time.Now()
	drv := s.opts.Drivers[rec.Driver]
	var driverState []byte
	release := func(context.Context) {} // the claim on its pause in the object store
	if p.MemoryKept {
		fr, ok := inst.(sandbox.Freezer)
		if !ok {
			return Info{}, fmt.Errorf("resume sandbox %s: %w: its instance cannot thaw", id, sandbox.ErrUnsupported)
		}
		if err := fr.Thaw(ctx); err != nil {
			return Info{}, fmt.Errorf("resume sandbox %s: %w", id, err)
		}
		driverState = rec.DriverState
	} else {
		pauser, ok := drv.(sandbox.Pauser)
		if !ok {
			return Info{}, fmt.Errorf("resume sandbox %s: %w: its driver %s cannot resume it here", id, sandbox.ErrUnsupported, rec.Driver)
		}
		dir := s.pausedDir(id)
		if !checked {
			if err := s.readyImage(ctx, rec, dir); err != nil {
				s.log.Error("a paused sandbox's image does not match its digests", "sandbox_id", id, "err", err)
				return Info{}, fmt.Errorf("resume sandbox %s: %w: its pause image was changed or cut short since the pause (%w); it stays paused, and can only be deleted", id, sandbox.ErrInvalid, err)
			}
		}
		if err := s.admitResume(c, rec); err != nil {
			return Info{}, err
		}
		var err error
		release, err = s.claimPause(ctx, rec, true)
		if err != nil {
			s.mu.Lock()
			l.mem = 0
			s.mu.Unlock()
			if errors.Is(err, errMoved) {
				s.forgetMoved(ctx, l)
				return Info{}, fmt.Errorf("resume sandbox %s: %w: another daemon sharing %s resumed or ended it; it is no longer here", id, sandbox.ErrNotFound, p.Stored.Where)
			}
			if errors.Is(err, ErrBusy) {
				if checked {
					s.unadopt(l)
				}
				return Info{}, fmt.Errorf("resume sandbox %s: %w", id, err)
			}
			return Info{}, fmt.Errorf("resume sandbox %s: claim it in the object store: %w", id, err)
		}
		s.step("claimed")
		inst, err = pauser.Resume(ctx, id, p.DriverState, dir)
		if err != nil {
			// Its pause stays in the object store as it was.
			release(context.WithoutCancel(ctx))
			s.untake(id)
			s.mu.Lock()
			l.mem = 0
			s.mu.Unlock()
			s.log.Error("resume sandbox", "sandbox_id", id, "err", err)
			return Info{}, fmt.Errorf("resume sandbox %s: the driver failed, and it stays paused (the daemon's log has the details): %w", id, errDriver)
		}
		if sh, ok := inst.(sandbox.StateHolder); ok && drv.Capabilities().SurvivesRestart {
			driverState, _ = sh.DriverState()
		}
	}
	now := s.opts.Now()
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.State, r.Paused = store.StateRunning, nil
		if !p.MemoryKept {
			r.DriverState = driverState
		}
		if p.TTLLeft > 0 {
			r.ExpiresAt = now.Add(p.TTLLeft).UTC()
		}
		return nil
	})
	if err != nil {
		s.log.Error("record sandbox resumed", "sandbox_id", id, "err", err)
	}
	l.mu.Lock()
	if err == nil {
		l.rec = rec
	}
	l.inst = inst
	l.mu.Unlock()
	l.touch(now)
	s.tellLifetime(ctx, l) // its TTL runs again, and its idle timeout from now
	if !p.MemoryKept {
		s.step("resumed")
		_ = os.RemoveAll(s.pausedDir(id))
		if p.Stored != nil {
			// Resumed and recorded: its pause in the object store is spent.
			s.dropStored(context.WithoutCancel(ctx), id, l.owner, p.Stored)
			release(context.WithoutCancel(ctx))
			s.untake(id)
		}
		s.m.Live.WithLabelValues(rec.Driver).Inc()
		s.wg.Add(1)
		go s.watch(l, inst)
		s.reattachProcs(ctx, l)
	}
	s.recordAfter(ctx, audit.Event{Kind: audit.KindResume, Key: c.KeyID, Sandbox: id,
		Reason: fmt.Sprintf("resumed in %v after %v paused", time.Since(started).Round(time.Millisecond), now.Sub(p.At).Round(time.Second))})
	s.log.Info("sandbox resumed", "sandbox_id", id)
	return s.info(l), nil
}

// admitResume checks the host's memory (and the caller's quota) for a
// paused sandbox to come back, and reserves it.
func (s *Supervisor) admitResume(c Caller, rec store.Sandbox) error {
	avail, err := s.opts.MemAvailable()
	if err != nil {
		return fmt.Errorf("read the host's available memory: %w", err)
	}
	need := s.memoryOf(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	var committed, mine int64
	for _, l := range s.live {
		committed += l.mem
		if l.owner == rec.Owner {
			mine += l.mem
		}
	}
	if q := c.Quota.WithDefaults(); rec.Owner == c.KeyID && mine+need > q.MaxMemoryBytes {
		return fmt.Errorf("%w: this key's sandboxes may hold %s of RAM together; %s are held and this one needs %s back: delete or pause a sandbox", ErrQuota, bytesText(q.MaxMemoryBytes), bytesText(mine), bytesText(need))
	}
	if free := avail - committed - int64(s.cfg.MemoryReserve); need > free {
		return fmt.Errorf("%w: the sandbox needs %s of RAM back but only %s is free for sandboxes; try again later, or delete sandboxes", ErrCapacity, bytesText(need), bytesText(max(free, 0)))
	}
	if l := s.live[rec.ID]; l != nil {
		l.mem = need
	}
	return nil
}

// pausedLive is sandbox id when it is live and paused (without an
// instance), or nil. The caller checked that it may see it (lookup).
func (s *Supervisor) pausedLive(id string) *live {
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rec.State != store.StatePaused || l.ending {
		return nil
	}
	return l
}

// finishPause takes up, on the daemon's start, a sandbox whose pause the
// previous daemon began and did not record as done: when its driver finds
// it saved, it is recorded paused (its image's digests taken now);
// otherwise the pause is forgotten and it is reattached as running.
func (s *Supervisor) finishPause(ctx context.Context, rec store.Sandbox) outcome {
	p := *rec.Paused
	rec.Paused = nil
	if pf, ok := s.opts.Drivers[rec.Driver].(sandbox.PauseFinder); ok {
		if state, saved := pf.Paused(ctx, rec.ID, rec.DriverState); saved {
			var err error
			p.Pending, p.DriverState = false, state
			if p.Digests, p.Bytes, err = digestDir(s.pausedDir(rec.ID)); err != nil {
				return s.lost(ctx, rec, "it was being paused when the previous daemon stopped, and its pause image cannot be read: "+err.Error())
			}
			if ps := s.pausedStore(); ps != nil {
				if err := s.storePause(ctx, ps, rec, &p, s.pausedDir(rec.ID)); err != nil {
					s.log.Warn("store a pause image in the object store: it stays on this daemon's disk only", "sandbox_id", rec.ID, "err", err)
				}
			}
			if rec, err = s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error {
				r.State, r.Paused = store.StatePaused, &p
				return nil
			}); err != nil {
				return s.lost(ctx, rec, "record its pause: "+err.Error())
			}
			s.log.Info("a pause the previous daemon began is done: the sandbox is paused", "sandbox_id", rec.ID)
			return s.keepPaused(ctx, rec)
		}
	}
	if _, err := s.store.UpdateSandbox(rec.ID, func(r *store.Sandbox) error { r.Paused = nil; return nil }); err != nil {
		s.log.Warn("forget a pause that did not happen", "sandbox_id", rec.ID, "err", err)
	}
	_ = os.RemoveAll(s.pausedDir(rec.ID))
	return s.recoverOne(ctx, rec)
}

// keepPaused takes up, on the daemon's start, a sandbox that was paused:
// it stays paused (a frozen one, whose memory died with its holder
// unless the driver kept it, is reattached and frozen still).
func (s *Supervisor) keepPaused(ctx context.Context, rec store.Sandbox) outcome {
	if rec.Paused == nil || rec.Paused.MemoryKept {
		// A freeze holds its processes: reattach to them, frozen (its
		// TTL waits: it is not checked).
		exp := rec.ExpiresAt
		rec.State, rec.ExpiresAt = store.StateRunning, time.Time{}
		out := s.recoverOne(ctx, rec)
		if out != outReattached {
			return out
		}
		s.mu.Lock()
		l := s.live[rec.ID]
		s.mu.Unlock()
		if rec.Paused != nil {
			l.mu.Lock()
			l.rec.State, l.rec.Paused, l.rec.ExpiresAt = store.StatePaused, rec.Paused, exp
			l.mu.Unlock()
		}
		return out
	}
	l := &live{rec: rec, owner: rec.Owner, procs: map[string]*proc{}}
	l.touch(rec.Paused.At)
	s.mu.Lock()
	s.live[rec.ID] = l
	s.mu.Unlock()
	s.log.Info("paused sandbox kept", "sandbox_id", rec.ID, "until", rec.Paused.Until)
	return outReattached
}

// thawPaused lets a frozen sandbox l, which ends, go on, so that its
// close finds its commands running.
func (s *Supervisor) thawPaused(ctx context.Context, l *live) {
	l.mu.Lock()
	rec, inst := l.rec, l.inst
	l.mu.Unlock()
	if fr, ok := inst.(sandbox.Freezer); ok && rec.State == store.StatePaused && rec.Paused != nil && rec.Paused.MemoryKept {
		if err := fr.Thaw(ctx); err != nil {
			s.log.Warn("thaw a frozen sandbox to end it", "sandbox_id", rec.ID, "err", err)
		}
	}
}

// discardPaused removes what a paused sandbox l, which ends, kept.
func (s *Supervisor) discardPaused(ctx context.Context, l *live) {
	l.mu.Lock()
	rec, inst := l.rec, l.inst
	l.mu.Unlock()
	if rec.State != store.StatePaused || rec.Paused == nil || rec.Paused.MemoryKept || inst != nil {
		return
	}
	if p, ok := s.opts.Drivers[rec.Driver].(sandbox.Pauser); ok {
		if err := p.Discard(ctx, rec.ID, rec.Paused.DriverState); err != nil {
			s.log.Warn("discard a paused sandbox", "sandbox_id", rec.ID, "err", err)
		}
	}
	if err := os.RemoveAll(s.pausedDir(rec.ID)); err != nil {
		s.log.Warn("remove a paused sandbox's image", "sandbox_id", rec.ID, "err", err)
	}
	s.unstorePause(ctx, rec)
}
