// Package supervisor runs sandboxes for the daemon: it owns the drivers and
// the registry (internal/store), creates sandboxes from templates (claiming
// a warm one from the template's pool when it can), checks each key's
// quotas and the host's memory before it creates, tracks the background
// processes of every sandbox, enforces TTLs and idle timeouts, sweeps
// orphans, and recovers after a crash.
//
// # Recovery
//
// The native driver's sandboxes cannot outlive the daemon that made them:
// each sandbox's agent is the daemon's child, dies with it (PDEATHSIG) and
// is PID 1 of the sandbox's PID namespace, so its death kills every process
// of the sandbox. After a crash or kill -9 of the daemon, what remains is
// the registry's records and, on the host, the sandboxes' cgroups. Recover
// therefore marks every record that was live as lost, then has each driver
// reap what its stale sandboxes left behind (native.Driver.Reap removes the
// cgroups of every sandbox no live process holds the lock of). A lost
// sandbox's record stays readable (state "lost") for Config.Retention, then
// it is pruned and GET answers 404.
package supervisor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Error classes of the supervisor, besides those of package sandbox.
var (
	// ErrForbidden: the caller may not touch this sandbox or do this.
	ErrForbidden = errors.New("forbidden")
	// ErrQuota: the caller's key has reached one of its quotas.
	ErrQuota = errors.New("quota exceeded")
	// ErrCapacity: the host has not enough memory left for the sandbox.
	ErrCapacity = errors.New("not enough memory on the host")
	// ErrNotRunning: the sandbox has ended.
	ErrNotRunning = errors.New("sandbox is not running")
)

// Options configure a Supervisor.
type Options struct {
	// Store is the registry. Required.
	Store *store.Store
	// Drivers by name. Required: at least the drivers templates name.
	Drivers map[string]sandbox.Driver
	// Config holds the templates and intervals.
	Config Config
	// Logger receives structured logs. Nil discards them.
	Logger *slog.Logger
	// Metrics receives counters; nil makes unregistered ones.
	Metrics *Metrics
	// MemAvailable reports the host's available memory. Nil reads
	// MemAvailable from /proc/meminfo.
	MemAvailable func() (int64, error)
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Policy decides every create, exec and file write or delete (see
	// guard.go). Nil means policy.Default(): the verifier's checks deny.
	Policy *policy.Policy
	// Audit records every action. Nil records nothing.
	Audit *audit.Log
	// NoApprover says nobody can decide approvals (the one-user supervisor
	// of stdio MCP): a verdict of ask denies at once instead of waiting.
	NoApprover bool
}

// Caller is who asks: the key's id, whether it is an operator, its quota
// and its rate limits. Operators see and manage every sandbox.
type Caller struct {
	KeyID    string
	Operator bool
	Quota    store.Quota
	// Rate bounds how fast the key acts and how much it has in flight
	// (see Begin). The first call of a key fixes its limiters.
	Rate store.RateLimits
	// Lineage lists the keys that made this one (store.Key.Lineage): none
	// of them may have asked for an approval this key decides.
	Lineage []string
}

// Supervisor runs sandboxes. Its methods are safe for concurrent use.
type Supervisor struct {
	opts      Options
	cfg       Config
	store     *store.Store
	log       *slog.Logger
	m         *Metrics
	templates map[string]Template

	mu    sync.Mutex
	live  map[string]*live
	pools map[string]*pool

	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup

	policy    *policy.Policy
	approvals approvals
	lim       limiters
	// stdinStall is how long a stdin write waits for a process that reads
	// nothing (defaultStdinStall; tests shorten it).
	stdinStall time.Duration
}

// live is a sandbox that may hold host resources.
type live struct {
	// owner is the owning key (guarded by Supervisor.mu; empty while
	// pooled) and mem the RAM it can pin (memoryOf): what quotas and
	// admission count.
	owner string
	mem   int64

	mu   sync.Mutex
	rec  store.Sandbox
	inst sandbox.Instance // nil while creating
	// ending is set once a kill started; no new work is accepted.
	ending bool

	lastActive atomic.Int64 // unix nanoseconds
	busy       atomic.Int32 // foreground execs and file transfers in flight

	procs    map[string]*proc
	finished []string // ids of ended processes, oldest first
}

func (l *live) touch(now time.Time) { l.lastActive.Store(now.UnixNano()) }

// New makes a Supervisor. Call Recover, then Run.
func New(opts Options) (*Supervisor, error) {
	if opts.Store == nil {
		return nil, errors.New("supervisor: no store")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.MemAvailable == nil {
		opts.MemAvailable = memAvailable
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg, err := opts.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{
		opts: opts, cfg: cfg, store: opts.Store, log: opts.Logger, m: opts.Metrics,
		templates: map[string]Template{},
		live:      map[string]*live{}, pools: map[string]*pool{},
		stop: make(chan struct{}), stdinStall: defaultStdinStall,
	}
	s.policy = opts.Policy
	if s.policy == nil {
		s.policy = policy.Default()
	}
	s.approvals.pending = map[string]*pendingApproval{}
	for _, t := range cfg.Templates {
		if _, ok := opts.Drivers[t.Driver]; !ok {
			return nil, fmt.Errorf("template %q: driver %q is not available in this daemon", t.Name, t.Driver)
		}
		s.templates[t.Name] = t
		if t.Pool > 0 {
			s.pools[t.Name] = &pool{tmpl: t, wake: make(chan struct{}, 1)}
		}
	}
	return s, nil
}

// Config returns the configuration in effect, defaults filled in.
func (s *Supervisor) Config() Config { return s.cfg }

// Templates lists the templates by name.
func (s *Supervisor) Templates() []Template {
	out := make([]Template, 0, len(s.templates))
	for _, t := range s.cfg.Templates {
		out = append(out, t)
	}
	return out
}

// CreateRequest asks for a sandbox. Zero fields take the template's values;
// set fields may narrow the template, never widen it.
type CreateRequest struct {
	// Template names the template; empty means "default".
	Template string
	// Limits narrow the template's limits (a zero field keeps the template's).
	Limits sandbox.Limits
	// Env is added to the template's environment.
	Env []string
	// TTL is the lifetime; zero means the template's. At most its max_ttl.
	TTL time.Duration
	// IdleTimeout overrides the template's idle timeout when set; it may not
	// exceed it when the template has one.
	IdleTimeout time.Duration
	// Network replaces the template's network when set; it may ask only for
	// what the template's network allows (see Template.network).
	Network sandbox.Network
}

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
	Limits     sandbox.Limits
	Env        []string
	Layers     []sandbox.Layer
	// FromPool says the create was a claim from a warm pool.
	FromPool bool
}

// Create makes a sandbox for caller, or claims a ready one from the
// template's pool when the request does not narrow the template.
func (s *Supervisor) Create(ctx context.Context, c Caller, req CreateRequest) (Info, error) {
	start := time.Now()
	ctx, done, err := s.Begin(ctx, c, OpCreate)
	if err != nil {
		return Info{}, err
	}
	defer done()
	name := req.Template
	if name == "" {
		name = DefaultTemplate
	}
	t, ok := s.templates[name]
	if !ok {
		return Info{}, fmt.Errorf("%w: template %q does not exist (have %v)", sandbox.ErrNotFound, name, s.templateNames())
	}
	spec, err := narrow(t, req)
	if err != nil {
		return Info{}, err
	}
	if spec.Network, err = t.network(req.Network); err != nil {
		return Info{}, err
	}
	ttl := time.Duration(t.TTL)
	if req.TTL > 0 {
		ttl = req.TTL
	}
	if req.TTL < 0 || ttl > time.Duration(t.MaxTTL) {
		return Info{}, fmt.Errorf("%w: ttl %s: template %q allows 1s to %s", sandbox.ErrInvalid, req.TTL, name, time.Duration(t.MaxTTL))
	}
	idle := time.Duration(t.IdleTimeout)
	if req.IdleTimeout != 0 {
		if req.IdleTimeout < 0 || (idle > 0 && req.IdleTimeout > idle) {
			return Info{}, fmt.Errorf("%w: idle timeout %s: template %q allows at most %s", sandbox.ErrInvalid, req.IdleTimeout, name, idle)
		}
		idle = req.IdleTimeout
	}
	if err := s.decide(ctx, c, policy.Request{Action: policy.ActionCreate, Template: name, Driver: t.Driver, Limits: &spec.Limits, Network: &spec.Network}); err != nil {
		return Info{}, err
	}
	s.policy.NarrowNetwork(&spec.Network)
	if p := s.pools[name]; p != nil {
		if claimable(t, req) {
			info, ok, err := s.claim(c, p, ttl, idle)
			if err != nil || ok {
				if ok {
					s.m.PoolHits.WithLabelValues(name).Inc()
					s.m.ClaimSeconds.Observe(time.Since(start).Seconds())
					s.recordAfter(ctx, audit.Event{Kind: audit.KindCreate, Key: c.KeyID, Sandbox: info.ID, Template: name, Reason: "claimed from the warm pool"})
				}
				return info, err
			}
		}
		s.m.PoolMisses.WithLabelValues(name).Inc()
	}
	now := s.opts.Now()
	rec := store.Sandbox{
		ID: newID(), Owner: c.KeyID, Template: name, Driver: t.Driver, Spec: spec,
		State: store.StateCreating, Created: now.UTC(), ExpiresAt: now.Add(ttl).UTC(), IdleTimeout: idle,
	}
	l, err := s.admit(c, rec)
	if err != nil {
		s.m.Creates.WithLabelValues(name, "refused").Inc()
		return Info{}, err
	}
	if err := s.start(ctx, l); err != nil {
		s.m.Creates.WithLabelValues(name, "error").Inc()
		return Info{}, err
	}
	s.m.Creates.WithLabelValues(name, "ok").Inc()
	s.m.CreateSeconds.Observe(time.Since(start).Seconds())
	s.recordAfter(ctx, audit.Event{Kind: audit.KindCreate, Key: c.KeyID, Sandbox: rec.ID, Template: name})
	return s.info(l), nil
}

func (s *Supervisor) templateNames() []string {
	var n []string
	for _, t := range s.cfg.Templates {
		n = append(n, t.Name)
	}
	return n
}

// narrow applies req to the template's spec, refusing anything wider.
func narrow(t Template, req CreateRequest) (sandbox.Spec, error) {
	s := t.spec()
	l, r := &s.Limits, req.Limits
	type lim struct {
		name      string
		got, tmpl float64
		set       func()
	}
	checks := []lim{
		{"memory_bytes", float64(r.MemoryBytes), float64(l.MemoryBytes), func() { l.MemoryBytes = r.MemoryBytes }},
		{"cpus", r.CPUs, l.CPUs, func() { l.CPUs = r.CPUs }},
		{"pids", float64(r.Pids), float64(l.Pids), func() { l.Pids = r.Pids }},
		{"timeout", float64(r.Timeout), float64(l.Timeout), func() { l.Timeout = r.Timeout }},
		{"disk_bytes", float64(r.DiskBytes), float64(l.DiskBytes), func() { l.DiskBytes = r.DiskBytes }},
		{"tmp_bytes", float64(r.TmpBytes), float64(l.TmpBytes), func() { l.TmpBytes = r.TmpBytes }},
		{"output_bytes", float64(r.OutputBytes), float64(l.OutputBytes), func() { l.OutputBytes = r.OutputBytes }},
		{"open_files", float64(r.OpenFiles), float64(l.OpenFiles), func() { l.OpenFiles = r.OpenFiles }},
	}
	for _, c := range checks {
		switch {
		case c.got < 0:
			return s, fmt.Errorf("%w: %s cannot be negative", sandbox.ErrInvalid, c.name)
		case c.got == 0:
		case c.got > c.tmpl:
			return s, fmt.Errorf("%w: %s %v is more than template %q allows (%v)", sandbox.ErrInvalid, c.name, c.got, t.Name, c.tmpl)
		default:
			c.set()
		}
	}
	if r.CPUTime < 0 {
		return s, fmt.Errorf("%w: cpu_time cannot be negative", sandbox.ErrInvalid)
	}
	if r.CPUTime > 0 {
		if l.CPUTime > 0 && r.CPUTime > l.CPUTime {
			return s, fmt.Errorf("%w: cpu_time %s is more than template %q allows (%s)", sandbox.ErrInvalid, r.CPUTime, t.Name, l.CPUTime)
		}
		l.CPUTime = r.CPUTime
	}
	if len(req.Env) > 256 {
		return s, fmt.Errorf("%w: at most 256 environment entries", sandbox.ErrInvalid)
	}
	s.Env = append(s.Env, req.Env...)
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// claimable says a request can be served by a sandbox made from the
// template as it is: it narrows no limit and adds no environment.
func claimable(t Template, req CreateRequest) bool {
	return req.Limits == (sandbox.Limits{}) && len(req.Env) == 0 && zeroNetwork(req.Network)
}

// memoryOf is what admission and quotas count for a sandbox: the RAM it
// can pin, its memory limit and its tmpfs mounts.
func memoryOf(rec store.Sandbox) int64 { return rec.Spec.Limits.PinnableBytes() }

// admit checks the caller's quota and the host's memory, and reserves both
// by registering rec as creating.
func (s *Supervisor) admit(c Caller, rec store.Sandbox) (*live, error) {
	avail, err := s.opts.MemAvailable()
	if err != nil {
		return nil, fmt.Errorf("read the host's available memory: %w", err)
	}
	need := memoryOf(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing() {
		return nil, fmt.Errorf("%w: the daemon is shutting down", ErrCapacity)
	}
	if rec.Owner != "" {
		if err := s.checkQuota(c, need); err != nil {
			return nil, err
		}
	}
	var committed int64
	for _, l := range s.live {
		committed += l.mem
	}
	free := avail - committed - int64(s.cfg.MemoryReserve)
	if need > free {
		return nil, fmt.Errorf("%w: the sandbox can hold %s of RAM (its memory limit and its /workspace, /tmp and /dev/shm tmpfs) but only %s is free for sandboxes (available %s, %s promised to %d live sandboxes, %s kept in reserve); ask for less memory, disk or tmp, or delete sandboxes",
			ErrCapacity, bytesText(need), bytesText(max(free, 0)), bytesText(avail), bytesText(committed), len(s.live), bytesText(int64(s.cfg.MemoryReserve)))
	}
	l := &live{rec: rec, owner: rec.Owner, mem: need, procs: map[string]*proc{}}
	l.touch(s.opts.Now())
	s.live[rec.ID] = l
	return l, nil
}

// checkQuota checks that c may have one more sandbox of need bytes of
// memory. s.mu is held.
func (s *Supervisor) checkQuota(c Caller, need int64) error {
	var mine int
	var mineMem int64
	for _, l := range s.live {
		if l.owner == c.KeyID {
			mine++
			mineMem += l.mem
		}
	}
	q := c.Quota.WithDefaults()
	if mine+1 > q.MaxSandboxes {
		return fmt.Errorf("%w: this key may have %d live sandboxes and has %d; delete one first", ErrQuota, q.MaxSandboxes, mine)
	}
	if mineMem+need > q.MaxMemoryBytes {
		return fmt.Errorf("%w: this key's sandboxes may hold %s of RAM together (memory limits and /workspace, /tmp and /dev/shm tmpfs); %s are held and this sandbox can hold %s: ask for less memory, disk or tmp, or delete a sandbox", ErrQuota, bytesText(q.MaxMemoryBytes), bytesText(mineMem), bytesText(need))
	}
	return nil
}

// start makes the sandbox l describes on its driver. On error l is gone.
func (s *Supervisor) start(ctx context.Context, l *live) (err error) {
	id := l.rec.ID
	defer func() {
		if err != nil {
			s.mu.Lock()
			delete(s.live, id)
			s.mu.Unlock()
			_ = s.store.DeleteSandbox(id)
		}
	}()
	if err := s.store.PutSandbox(l.rec); err != nil {
		return fmt.Errorf("record sandbox: %w", err)
	}
	drv := s.opts.Drivers[l.rec.Driver]
	spec := l.rec.Spec
	spec.ID = id
	// The supervisor enforces the TTL, which can be extended; the driver's
	// own lifetime is only a backstop.
	spec.Limits.Lifetime = driverLifetime
	inst, err := drv.Create(ctx, spec)
	if err != nil {
		return s.driverError(id, err)
	}
	state := store.StateRunning
	if l.rec.Owner == "" {
		state = store.StatePooled
	}
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error { r.State = state; return nil })
	if err != nil {
		_ = inst.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("record sandbox: %w", err)
	}
	l.mu.Lock()
	if l.ending { // the daemon began shutting down meanwhile
		l.mu.Unlock()
		_ = inst.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("%w: the daemon is shutting down", ErrCapacity)
	}
	l.inst, l.rec = inst, rec
	l.mu.Unlock()
	s.m.Live.WithLabelValues(rec.Driver).Inc()
	s.log.Info("sandbox created", "sandbox_id", id, "template", rec.Template, "owner", rec.Owner, "state", rec.State)
	s.wg.Add(1)
	go s.watch(l, inst)
	return nil
}

// driverError turns a driver's failure to create into what the caller may
// read: a missing isolation layer says which and how to fix it; anything
// else (it may name host paths of the template) goes to the log only.
func (s *Supervisor) driverError(id string, err error) error {
	var le *sandbox.LayerError
	switch {
	case errors.As(err, &le):
		return fmt.Errorf("create sandbox: %w", le)
	case errors.Is(err, sandbox.ErrLimit):
		s.log.Warn("create sandbox", "sandbox_id", id, "err", err)
		return fmt.Errorf("%w: the host has no room for another sandbox", ErrCapacity)
	}
	s.log.Error("create sandbox", "sandbox_id", id, "err", err)
	return fmt.Errorf("create sandbox %s: the driver failed (the daemon's log has the details): %w", id, errDriver)
}

// errDriver is a driver failure whose details stay in the log.
var errDriver = errors.New("driver error")

// driverLifetime is the driver's backstop lifetime of a sandbox.
const driverLifetime = 30 * 24 * time.Hour

// watch notices a sandbox that ended by itself (its agent died).
func (s *Supervisor) watch(l *live, inst sandbox.Instance) {
	defer s.wg.Done()
	select {
	case <-inst.Done():
		s.end(l, "ended", "the sandbox ended by itself (its agent exited)")
	case <-s.stop:
	}
}

// lookup finds the live sandbox id for c; ErrNotFound when it does not
// exist or is pooled, ErrForbidden when another key owns it, ErrNotRunning
// when it has ended.
func (s *Supervisor) lookup(c Caller, id string) (*live, error) {
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
	if inst == nil || ending {
		return nil, fmt.Errorf("sandbox %s is %s: %w", id, map[bool]string{true: "ending", false: "still being created"}[ending], ErrNotRunning)
	}
	return l, nil
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
}

// List describes the sandboxes c may see that match f, live and ended, in
// id order.
func (s *Supervisor) List(ctx context.Context, c Caller, f Filter) ([]Info, error) {
	recs, err := s.store.Sandboxes(func(r *store.Sandbox) bool {
		return allowed(c, *r) == nil && (f.Template == "" || r.Template == f.Template)
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
	return out, nil
}

func recInfo(r store.Sandbox) Info {
	return Info{
		ID: r.ID, Owner: r.Owner, Template: r.Template, Driver: r.Driver, State: r.State,
		Created: r.Created, ExpiresAt: r.ExpiresAt, IdleTimeout: r.IdleTimeout,
		Ended: r.Ended, EndReason: r.EndReason, Limits: r.Spec.Limits, Env: r.Spec.Env,
	}
}

func (s *Supervisor) info(l *live) Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := recInfo(l.rec)
	in.LastActive = time.Unix(0, l.lastActive.Load()).UTC()
	if l.inst != nil {
		in.Layers = l.inst.Layers()
	}
	return in
}

// Kill destroys the sandbox id. Killing a sandbox that has already ended
// is not an error.
func (s *Supervisor) Kill(ctx context.Context, c Caller, id string) error {
	l, err := s.lookup(c, id)
	if errors.Is(err, ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	s.end(l, "deleted", "deleted by its owner")
	return nil
}

// ExtendTimeout sets the sandbox's TTL deadline to d from now (it may
// shorten it too). d is bounded by the template's max_ttl.
func (s *Supervisor) ExtendTimeout(ctx context.Context, c Caller, id string, d time.Duration) (Info, error) {
	l, err := s.lookup(c, id)
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
	inst, id, drv := l.inst, l.rec.ID, l.rec.Driver
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
	if inst != nil {
		if err := inst.Close(ctx); err != nil {
			s.log.Warn("close sandbox", "sandbox_id", id, "err", err)
		}
	}
	now := s.opts.Now().UTC()
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.State, r.Ended, r.EndReason = store.StateDestroyed, now, reason
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

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// bytesText writes n in binary units ("512 MiB").
func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
