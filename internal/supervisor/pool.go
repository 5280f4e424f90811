package supervisor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// pool keeps a template's sandboxes ready. Its fields are guarded by
// Supervisor.mu.
type pool struct {
	tmpl    Template
	wake    chan struct{}
	ready   []string // ids of pooled sandboxes, oldest first
	filling int      // creates in flight
}

// refillDelay is how long after a claim the pool starts to replace the
// sandbox claimed.
const refillDelay = 50 * time.Millisecond

// kick wakes the pool's filler without blocking.
func (p *pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// forget drops id from the ready list (it ended). Supervisor.mu is held.
func (p *pool) forget(id string) {
	p.ready = slices.DeleteFunc(p.ready, func(r string) bool { return r == id })
}

// PoolStatus describes one template's pool.
type PoolStatus struct {
	Template string
	Size     int
	Ready    int
	Filling  int
}

// Pools describes every pool.
func (s *Supervisor) Pools() []PoolStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PoolStatus
	for _, t := range s.cfg.Templates {
		if p := s.pools[t.Name]; p != nil {
			out = append(out, PoolStatus{Template: t.Name, Size: t.Pool, Ready: len(p.ready), Filling: p.filling})
		}
	}
	return out
}

// claim hands a ready sandbox of p to c. ok is false when none is ready.
func (s *Supervisor) claim(c Caller, p *pool, ttl, idle time.Duration, req CreateRequest) (_ Info, ok bool, _ error) {
	now := s.opts.Now()
	s.mu.Lock()
	var l *live
	for len(p.ready) > 0 && l == nil {
		id := p.ready[0]
		p.ready = p.ready[1:]
		cand := s.live[id]
		if cand == nil {
			continue
		}
		cand.mu.Lock()
		usable := !cand.ending && cand.inst != nil
		cand.mu.Unlock()
		if !usable {
			continue
		}
		if err := s.checkQuota(c, cand.mem); err != nil {
			p.ready = append([]string{id}, p.ready...)
			s.mu.Unlock()
			return Info{}, false, err
		}
		l = cand
	}
	if l == nil {
		s.mu.Unlock()
		return Info{}, false, nil
	}
	l.owner = c.KeyID
	s.mu.Unlock()
	// The replacement is made a moment later: made at once, it competes
	// for the CPU with the claimer's first commands, which it doubled on a
	// small host (the e2b bench rows).
	time.AfterFunc(refillDelay, p.kick)

	l.touch(now)
	exp := now.Add(ttl).UTC()
	l.mu.Lock()
	id := l.rec.ID
	l.mu.Unlock()
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.Owner, r.State, r.ExpiresAt, r.IdleTimeout = c.KeyID, store.StateRunning, exp, idle
		r.Metadata, r.Token = maps.Clone(req.Metadata), req.Token
		r.Lifecycle = lifecycleOf(req, ttl)
		return nil
	})
	if err != nil {
		s.end(l, "error", "recording the claim failed")
		return Info{}, false, fmt.Errorf("record the claim: %w", err)
	}
	l.mu.Lock()
	l.rec = rec
	l.mu.Unlock()
	s.tellLifetime(context.Background(), l)
	in := s.info(l)
	in.FromPool = true
	s.log.Info("sandbox claimed from pool", "sandbox_id", rec.ID, "template", rec.Template, "owner", c.KeyID)
	return in, true, nil
}

// fill keeps p at its size until the supervisor stops.
func (s *Supervisor) fill(p *pool) {
	defer s.wg.Done()
	backoff := time.Second
	for {
		s.mu.Lock()
		missing := p.tmpl.Pool - len(p.ready) - p.filling
		if missing > 0 {
			p.filling++
		}
		s.mu.Unlock()
		if missing <= 0 {
			select {
			case <-p.wake:
				continue
			case <-s.stop:
				return
			}
		}
		id, err := s.createPooled(p.tmpl)
		s.mu.Lock()
		p.filling--
		if err == nil {
			p.ready = append(p.ready, id)
		}
		s.mu.Unlock()
		if err == nil {
			backoff = time.Second
			continue
		}
		s.log.Warn("refill pool", "template", p.tmpl.Name, "err", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-s.stop:
			return
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// createPooled makes one unowned sandbox of t.
func (s *Supervisor) createPooled(t Template) (string, error) {
	spec := t.spec()
	s.policy.NarrowNetwork(&spec.Network)
	now := s.opts.Now()
	rec := store.Sandbox{
		ID: newID(), Template: t.Name, Driver: t.Driver, Spec: spec,
		State: store.StateCreating, Created: now.UTC(), IdleTimeout: time.Duration(t.IdleTimeout),
	}
	l, err := s.admit(Caller{}, rec)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.start(ctx, l); err != nil {
		return "", err
	}
	return rec.ID, nil
}
