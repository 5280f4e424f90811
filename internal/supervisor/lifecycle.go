package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds a sandbox's lifecycle other than its end at its TTL
// (E2B's `lifecycle: {onTimeout: 'pause', autoResume}`): made with
// OnTimeout "pause", its TTL pauses it (the reaper starts the pause, and
// ends it when the pause fails); made with AutoResume too, a call that
// needs it running (an exec, a file, a process, a port, a snapshot)
// resumes it first, and a resume after a pause at its TTL gives it the
// TTL it was made with again.

// OnTimeoutPause is CreateRequest.OnTimeout's pause.
const OnTimeoutPause = "pause"

// checkLifecycle checks req's OnTimeout and AutoResume.
func checkLifecycle(req CreateRequest) error {
	switch req.OnTimeout {
	case "", "kill", OnTimeoutPause:
	default:
		return fmt.Errorf("%w: on_timeout %q: say kill (the default) or pause", sandbox.ErrInvalid, req.OnTimeout)
	}
	if req.AutoResume && req.OnTimeout != OnTimeoutPause {
		return fmt.Errorf("%w: auto_resume needs on_timeout pause: a sandbox its TTL ends cannot be resumed", sandbox.ErrInvalid)
	}
	return nil
}

// canPauseAtTTL refuses, with its driver's reason, a sandbox to be paused
// at its TTL on a driver that cannot pause.
func (s *Supervisor) canPauseAtTTL(driver string, req CreateRequest) error {
	if req.OnTimeout != OnTimeoutPause {
		return nil
	}
	d, ok := s.opts.Drivers[driver]
	if !ok {
		return nil // chooseDriver vouched for it
	}
	if err := d.Capabilities().CheckPause(driver); err != nil {
		return fmt.Errorf("on_timeout pause: %w", err)
	}
	return nil
}

// lifecycleOf is the record of req's lifecycle, made with TTL ttl; nil
// for a sandbox its TTL ends.
func lifecycleOf(req CreateRequest, ttl time.Duration) *store.Lifecycle {
	if req.OnTimeout != OnTimeoutPause {
		return nil
	}
	return &store.Lifecycle{OnTimeout: OnTimeoutPause, AutoResume: req.AutoResume, TTL: ttl}
}

// pausesAtTTL says whether rec's TTL pauses it.
func pausesAtTTL(rec store.Sandbox) bool {
	return rec.Lifecycle != nil && rec.Lifecycle.OnTimeout == OnTimeoutPause
}

// pauseGrace is how long past its TTL the holder of rec keeps it, where
// the holder ends it by itself: a sandbox its TTL pauses is the daemon's
// to pause then, and only a daemon gone for that long lets the holder end
// it.
func pauseGrace(rec store.Sandbox) time.Duration {
	if pausesAtTTL(rec) {
		return pauseTimeout + time.Minute
	}
	return 0
}

// ttlLeft is what a sandbox rec paused at now keeps of its TTL for its
// resume: the TTL it was made with when its TTL is what paused it.
func ttlLeft(rec store.Sandbox, now time.Time) time.Duration {
	if pausesAtTTL(rec) && rec.Lifecycle.TTL > 0 && !now.Before(rec.ExpiresAt) {
		return rec.Lifecycle.TTL
	}
	return max(rec.ExpiresAt.Sub(now), time.Second)
}

// pauseAtTTL starts the pause of l, whose TTL ran out, when rec says its
// TTL pauses it, and says whether it did (or one runs already). Called
// with s.mu held: the pause runs on its own goroutine.
func (s *Supervisor) pauseAtTTL(l *live, rec store.Sandbox) bool {
	if !pausesAtTTL(rec) {
		return false
	}
	if !l.autoPausing.CompareAndSwap(false, true) {
		return true
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer l.autoPausing.Store(false)
		c := Caller{KeyID: rec.Owner, Operator: true}
		_, err := s.Pause(context.Background(), c, rec.ID)
		switch {
		case err == nil, errors.Is(err, ErrPaused), errors.Is(err, ErrNotRunning), errors.Is(err, sandbox.ErrNotFound):
		case errors.Is(err, ErrBusy):
			// A foreground exec or a transfer runs: the next reap tries
			// again once it ended.
			s.log.Info("a sandbox's TTL ran out while it was busy: its pause waits", "sandbox_id", rec.ID)
		default:
			s.log.Warn("pause a sandbox at its TTL: it ends instead", "sandbox_id", rec.ID, "err", err)
			s.end(l, "ttl", "its time to live ran out, and its pause failed: "+err.Error())
		}
	}()
	return true
}

// lookup is lookupAsIs, except that a paused sandbox made with
// auto-resume is resumed first (for c: its quota and the host's memory
// are checked as at any resume). A sandbox this daemon does not hold that
// is paused on another daemon sharing the object store is paused as one
// here is: refused as paused (ErrPaused), or, made with auto-resume,
// taken up and resumed here (decision 90).
func (s *Supervisor) lookup(c Caller, id string) (*live, error) {
	l, err := s.lookupAsIs(c, id)
	var lc *store.Lifecycle
	switch {
	case errors.Is(err, ErrPaused):
		pl := s.pausedLive(id)
		if pl == nil {
			return nil, err
		}
		pl.mu.Lock()
		lc = pl.rec.Lifecycle
		pl.mu.Unlock()
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, ErrNotRunning):
		rec, ok := s.pausedElsewhere(id)
		if !ok {
			return nil, err
		}
		if err := allowed(c, rec); err != nil {
			return nil, err
		}
		err, lc = pausedError(id), rec.Lifecycle
	default:
		return l, err
	}
	if lc == nil || !lc.AutoResume {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), pauseTimeout)
	defer cancel()
	if _, rerr := s.Resume(ctx, c, id); rerr != nil {
		return nil, fmt.Errorf("sandbox %s was paused, and resumes when used; its resume failed: %w", id, rerr)
	}
	return s.lookupAsIs(c, id)
}
