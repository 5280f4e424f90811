package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds the ends of a sandbox's life: its TTL, Kill, end (once
// per sandbox, whatever the reason) and Close.

// Kill destroys the sandbox id. Killing a sandbox that has already ended
// is not an error.
func (s *Supervisor) Kill(ctx context.Context, c Caller, id string) error {
	l, err := s.lookupAsIs(c, id)
	if errors.Is(err, ErrPaused) {
		l, err = s.pausedLive(id), nil
	}
	if errors.Is(err, ErrNotRunning) || errors.Is(err, sandbox.ErrNotFound) {
		// Paused on another daemon sharing the object store (pauselist.go).
		if ok, serr := s.killStored(ctx, c, id); ok || serr != nil {
			return serr
		}
	}
	if errors.Is(err, ErrNotRunning) || err == nil && l == nil {
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	owner := l.owner
	s.mu.Unlock()
	why := "deleted by its owner"
	if c.KeyID != owner {
		why = "deleted by operator key " + c.KeyID
	}
	l.mu.Lock()
	stored := l.rec.Paused != nil && l.rec.Paused.Stored != nil
	l.mu.Unlock()
	s.end(l, "deleted", why)
	if stored {
		// Moved from here and paused again elsewhere: that pause goes too.
		if _, err := s.killStored(ctx, c, id); err != nil {
			s.log.Warn("delete a sandbox's later pause from the object store", "sandbox_id", id, "err", err)
		}
	}
	return nil
}

// ExtendTimeout sets the sandbox's TTL deadline to d from now (it may
// shorten it too). d is bounded by the template's max_ttl.
func (s *Supervisor) ExtendTimeout(ctx context.Context, c Caller, id string, d time.Duration) (Info, error) {
	l, err := s.lookupAsIs(c, id)
	if err != nil {
		return Info{}, err
	}
	l.mu.Lock()
	t := s.templates[l.rec.Template]
	l.mu.Unlock()
	if d <= 0 || d > time.Duration(t.MaxTTL) {
		return Info{}, fmt.Errorf("%w: timeout %s: template %q allows 1s to %s from now", sandbox.ErrInvalid, d, t.Name, time.Duration(t.MaxTTL))
	}
	exp := s.opts.Now().Add(d).UTC()
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.ExpiresAt = exp; return nil })
	if err != nil {
		return Info{}, err
	}
	l.mu.Lock()
	l.rec.ExpiresAt = rec.ExpiresAt
	l.mu.Unlock()
	l.touch(s.opts.Now())
	s.tellLifetime(ctx, l)
	return s.info(l), nil
}

// end destroys l for reason (a kills-by-reason label) and records why.
// It runs once per sandbox.
func (s *Supervisor) end(l *live, reason, why string) {
	l.mu.Lock()
	if l.ending {
		l.mu.Unlock()
		return
	}
	l.ending = true
	inst, id, drv, release := l.inst, l.rec.ID, l.rec.Driver, l.releaseImage
	procs := make([]*proc, 0, len(l.procs))
	for _, p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	for _, p := range procs {
		p.closeStdin()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.thawPaused(ctx, l)
	closed := true
	if inst != nil {
		if err := inst.Close(ctx); err != nil {
			closed = false
			s.log.Warn("close sandbox", "sandbox_id", id, "err", err)
		}
	}
	s.discardPaused(ctx, l)
	// Its image's root may be evicted once nothing runs on it; a sandbox
	// that would not close keeps it.
	if release != nil && closed {
		release()
	}
	now := s.opts.Now().UTC()
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.State, r.Ended, r.EndReason, r.EndMessage = store.StateDestroyed, now, reason, why
		return nil
	})
	if err != nil {
		s.log.Error("record the end of a sandbox", "sandbox_id", id, "err", err)
	} else {
		l.mu.Lock()
		l.rec = rec
		l.mu.Unlock()
	}
	s.mu.Lock()
	if s.live[id] == l {
		delete(s.live, id)
	}
	for _, p := range s.pools {
		p.forget(id)
	}
	s.mu.Unlock()
	if inst != nil {
		s.m.Live.WithLabelValues(drv).Dec()
	}
	s.m.Kills.WithLabelValues(reason).Inc()
	s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: l.owner, Sandbox: id, Reason: reason + ": " + why})
	s.dropCheckpoints(ctx, l.owner, id)
	s.log.Info("sandbox destroyed", "sandbox_id", id, "reason", reason, "why", why)
}

func (s *Supervisor) closing() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Close destroys every live sandbox (reason "shutdown") and stops the
// reaper and the pools. The store stays open; its owner closes it.
func (s *Supervisor) Close(ctx context.Context) error {
	s.stopped.Do(func() { close(s.stop) })
	s.mu.Lock()
	ls := make([]*live, 0, len(s.live))
	for _, l := range s.live {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.end(l, "shutdown", "the daemon is shutting down")
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return nil
}
