package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds how callers find sandboxes: lookup, Get and List.

// Info describes a sandbox to its owner.
type Info struct {
	ID          string
	Owner       string
	Template    string
	Driver      string
	State       store.State
	Created     time.Time
	ExpiresAt   time.Time
	IdleTimeout time.Duration
	// LastActive is when it was last used; zero unless live.
	LastActive time.Time
	Ended      time.Time
	EndReason  string
	// EndMessage says why it ended, in words.
	EndMessage string
	// AgentProtocol is the protocol version its agent speaks (0: no
	// agent, or not known).
	AgentProtocol int
	// Mismatch, when set, says why the sandbox only ends: a daemon of
	// another protocol version made it.
	Mismatch string
	Limits   sandbox.Limits
	Env      []string
	// Home is its home (sandbox.Spec.Home): empty for /workspace.
	Home   string
	Layers []sandbox.Layer
	// FromPool says the create was a claim from a warm pool.
	FromPool bool
	// DriverRule says what chose the driver: "tier:NAME", "request" or
	// "template" (empty for a pooled sandbox); DriverReason says why.
	DriverRule, DriverReason string
	// Execs counts the execs and processes the policy let run in it while
	// this daemon ran it; zero unless live.
	Execs int64
	// Metadata is the owner's labels (CreateRequest.Metadata).
	Metadata map[string]string
	// Token is the secret the owner chose at create (CreateRequest.Token).
	Token string
	// Checkpoints is how many per-exec checkpoints it keeps; Steps counts
	// the checkpoints taken so far (its execs, while it keeps them).
	Checkpoints int
	Steps       int64
	// Paused is set while it is paused.
	Paused *store.Paused
	// Lifecycle is set when its TTL pauses it (CreateRequest.OnTimeout).
	Lifecycle *store.Lifecycle
	// Pull is set while its create waits for its image's pull.
	Pull *ImagePull
}

// lookupAsIs finds the live sandbox id for c; ErrNotFound when it does
// not exist or is pooled, ErrForbidden when another key owns it,
// ErrNotRunning when it has ended, ErrPaused when it is paused (lookup
// resumes one made with auto-resume).
func (s *Supervisor) lookupAsIs(c Caller, id string) (*live, error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l == nil {
		rec, err := s.store.GetSandbox(id)
		if err != nil {
			return nil, err
		}
		if err := allowed(c, rec); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("sandbox %s is %s (%s): %w", id, rec.State, rec.EndReason, ErrNotRunning)
	}
	l.mu.Lock()
	rec, inst, ending := l.rec, l.inst, l.ending
	l.mu.Unlock()
	if err := allowed(c, rec); err != nil {
		return nil, err
	}
	if rec.State == store.StatePaused && !ending {
		return nil, pausedError(id)
	}
	if inst == nil || ending {
		return nil, fmt.Errorf("sandbox %s is %s: %w", id, map[bool]string{true: "ending", false: "still being created"}[ending], ErrNotRunning)
	}
	return l, nil
}

// pausedError is what a call that needs sandbox id running is told while
// it is paused, here or on another daemon sharing the object store.
func pausedError(id string) error {
	return fmt.Errorf("sandbox %s is paused: resume it first (POST /v1/sandboxes/%s/resume, airlock sandbox resume %s): %w", id, id, id, ErrPaused)
}

// allowed says whether c may see rec.
func allowed(c Caller, rec store.Sandbox) error {
	switch {
	case rec.Owner == "" && !c.Operator:
		return fmt.Errorf("sandbox %s: %w", rec.ID, sandbox.ErrNotFound)
	case rec.Owner != c.KeyID && !c.Operator:
		return fmt.Errorf("sandbox %s belongs to another key: %w", rec.ID, ErrForbidden)
	}
	return nil
}

// Get describes the sandbox id: live, or ended and still on record.
func (s *Supervisor) Get(ctx context.Context, c Caller, id string) (Info, error) {
	return s.get(ctx, c, id, nil)
}

// get is Get, where a sandbox this daemon does not hold is looked for in
// the object store only when gate (nil: always) says yes.
func (s *Supervisor) get(ctx context.Context, c Caller, id string, gate func() bool) (Info, error) {
	if !sandbox.ValidID(id) {
		return Info{}, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		rec := l.rec
		l.mu.Unlock()
		if err := allowed(c, rec); err != nil {
			return Info{}, err
		}
		return s.info(l), nil
	}
	rec, err := s.store.GetSandbox(id)
	if (errors.Is(err, sandbox.ErrNotFound) || (err == nil && rec.EndReason == "moved")) && s.pausedStore() != nil && (gate == nil || gate()) {
		// Paused on another daemon sharing the object store (again,
		// for one that moved from here).
		if in, ok, serr := s.storedGet(ctx, c, id); ok || serr != nil {
			return in, serr
		}
	}
	if err != nil {
		return Info{}, err
	}
	if err := allowed(c, rec); err != nil {
		return Info{}, err
	}
	return recInfo(rec), nil
}

// Filter narrows List; empty fields match everything.
type Filter struct {
	State    store.State
	Template string
	// Owner is the owning key's id; Driver the driver's name.
	Owner  string
	Driver string
	// Metadata matches the sandboxes that have every one of these pairs.
	Metadata map[string]string
}

// matches says whether rec's metadata holds every pair of f's.
func (f Filter) matches(rec *store.Sandbox) bool {
	for k, v := range f.Metadata {
		if got, ok := rec.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// List describes the sandboxes c may see that match f, live and ended, in
// id order.
func (s *Supervisor) List(ctx context.Context, c Caller, f Filter) ([]Info, error) {
	recs, err := s.store.Sandboxes(func(r *store.Sandbox) bool {
		return allowed(c, *r) == nil && (f.Template == "" || r.Template == f.Template) &&
			(f.Owner == "" || r.Owner == f.Owner) && (f.Driver == "" || r.Driver == f.Driver) && f.matches(r)
	})
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(recs))
	for _, r := range recs {
		s.mu.Lock()
		l := s.live[r.ID]
		s.mu.Unlock()
		var in Info
		if l != nil {
			in = s.info(l)
		} else {
			in = recInfo(r)
		}
		if f.State == "" || in.State == f.State {
			out = append(out, in)
		}
	}
	return s.withStored(ctx, c, f, out), nil
}

func recInfo(r store.Sandbox) Info {
	return Info{
		ID: r.ID, Owner: r.Owner, Template: r.Template, Driver: r.Driver, State: r.State,
		Created: r.Created, ExpiresAt: r.ExpiresAt, IdleTimeout: r.IdleTimeout,
		Ended: r.Ended, EndReason: r.EndReason, EndMessage: r.EndMessage, AgentProtocol: r.AgentProtocol,
		Limits: r.Spec.Limits, Env: r.Spec.Env, Home: r.Spec.Home, DriverRule: r.DriverRule, DriverReason: r.DriverReason,
		Metadata: maps.Clone(r.Metadata), Token: r.Token, Checkpoints: r.Checkpoints,
		Paused: r.Paused, Lifecycle: r.Lifecycle,
	}
}

func (s *Supervisor) info(l *live) Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := recInfo(l.rec)
	in.Pull = s.pullOf(l.rec)
	in.LastActive = time.Unix(0, l.lastActive.Load()).UTC()
	in.Execs = l.execs.Load()
	in.Mismatch = l.mismatch
	in.Steps = l.step.Load()
	if l.inst != nil {
		in.Layers = l.inst.Layers()
		if v, _ := agentProtocol(l.inst); v != 0 {
			in.AgentProtocol = v
		}
	}
	return in
}

// LiveIDs lists the ids of the sandboxes that may hold host resources.
func (s *Supervisor) LiveIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
