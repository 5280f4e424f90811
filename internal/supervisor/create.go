package supervisor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// This file holds Create: templates narrowed by the request, admission
// (the key's quota and the host's memory), and the driver's create.

// CreateRequest asks for a sandbox. Zero fields take the template's values;
// set fields may narrow the template, never widen it.
type CreateRequest struct {
	// Template names the template; empty means "default".
	Template string
	// Driver names the driver; empty means the template's, or the one a
	// policy tier chooses. A driver named here is never changed: a policy
	// that does not allow it refuses the create.
	Driver string
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
	// Metadata labels the sandbox for its owner (see CheckMetadata); List
	// filters by it. It changes nothing in the sandbox, so a pooled one
	// can still be claimed.
	Metadata map[string]string
	// Token is a secret kept with the sandbox and returned only to its
	// owner (Info.Token): the E2B endpoints' envd access token. At most
	// 256 bytes; empty: none.
	Token string
	// Checkpoints keeps a snapshot of /workspace before each of its last
	// this many execs (rollback.go); zero keeps none.
	Checkpoints int
	// Mounts are host paths added to the template's; each must be named
	// by the policy's mounts allowlist.
	Mounts []sandbox.Mount
	// Home replaces the template's home when set (sandbox.Spec.Home,
	// /home/NAME): the E2B endpoints ask for sandbox.E2BHome.
	Home string
	// OnTimeout "pause" pauses the sandbox at its TTL instead of ending
	// it ("" or "kill": ended), where its driver can pause; AutoResume
	// (with "pause" only) has a call that needs it running resume it
	// first (lifecycle.go).
	OnTimeout  string
	AutoResume bool
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
	if err := CheckMetadata(req.Metadata); err != nil {
		return Info{}, err
	}
	if len(req.Token) > maxToken {
		return Info{}, fmt.Errorf("%w: token: at most %d bytes", sandbox.ErrInvalid, maxToken)
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
	if req.Checkpoints < 0 || req.Checkpoints > maxCheckpoints {
		return Info{}, fmt.Errorf("%w: checkpoints %d: keep 0 to %d", sandbox.ErrInvalid, req.Checkpoints, maxCheckpoints)
	}
	if err := checkLifecycle(req); err != nil {
		return Info{}, err
	}
	if req.Checkpoints > 0 && s.opts.Snapshots == nil {
		return Info{}, &sandbox.UnsupportedError{What: "checkpoints", Why: "this daemon keeps no snapshot store", Fix: "run `airlock serve` with a data directory"}
	}
	for _, m := range req.Mounts {
		if !s.policy.MountAllowed(m.String()) {
			return Info{}, &policy.Denied{Decision: policy.Decision{Verdict: policy.Deny, Rule: "mounts",
				Reason: fmt.Sprintf("mount %q is not in the policy's mounts allowlist: an operator adds it to mounts in the policy file (a create through the API may mount only what the policy lists)", m.String())}}
		}
		spec.Mounts = append(spec.Mounts, m)
	}
	if err := spec.Validate(); err != nil {
		return Info{}, err
	}
	var mounts []string
	for _, m := range spec.Mounts {
		mounts = append(mounts, m.String())
	}
	choice, err := s.chooseDriver(ctx, c, name, t, req, spec)
	if err != nil {
		return Info{}, err
	}
	if err := s.canPauseAtTTL(choice.Driver, req); err != nil {
		return Info{}, err
	}
	if err := s.decide(ctx, c, policy.Request{Action: policy.ActionCreate, Template: name, Driver: choice.Driver, Limits: &spec.Limits, Network: &spec.Network,
		Image: spec.Image, Mounts: mounts, Explicit: req.Driver != "", Labels: c.Labels}); err != nil {
		return Info{}, err
	}
	s.policy.NarrowNetwork(&spec.Network)
	if p := s.pools[name]; p != nil && choice.Driver == t.Driver {
		if claimable(t, req) && req.Checkpoints == 0 {
			info, ok, err := s.claim(c, p, ttl, idle, req)
			if err != nil || ok {
				if ok {
					s.m.PoolHits.WithLabelValues(name).Inc()
					s.m.ClaimSeconds.Observe(time.Since(start).Seconds())
					img, digest := s.imageOf(info.ID)
					s.recordAfter(ctx, audit.Event{Kind: audit.KindCreate, Key: c.KeyID, Sandbox: info.ID, Template: name, Rule: choice.Rule,
						Image: img, ImageDigest: digest, Reason: "claimed from the warm pool; driver " + choice.Driver + ": " + choice.Reason})
					info.DriverRule, info.DriverReason = choice.Rule, choice.Reason
				}
				return info, err
			}
		}
		s.m.PoolMisses.WithLabelValues(name).Inc()
	}
	now := s.opts.Now()
	rec := store.Sandbox{
		ID: newID(), Owner: c.KeyID, Template: name, Driver: choice.Driver, Spec: spec,
		DriverRule: choice.Rule, DriverReason: choice.Reason,
		State: store.StateCreating, Created: now.UTC(), ExpiresAt: now.Add(ttl).UTC(), IdleTimeout: idle,
		Metadata: maps.Clone(req.Metadata), Token: req.Token,
		Checkpoints: req.Checkpoints, Lifecycle: lifecycleOf(req, ttl),
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
	img, digest := s.imageOf(rec.ID)
	s.recordAfter(ctx, audit.Event{Kind: audit.KindCreate, Key: c.KeyID, Sandbox: rec.ID, Template: name, Rule: choice.Rule,
		Image: img, ImageDigest: digest, Reason: "driver " + choice.Driver + ": " + choice.Reason})
	return s.info(l), nil
}

// Bounds of a sandbox's metadata and token.
const (
	maxMetadata      = 64
	maxMetadataKey   = 256
	maxMetadataValue = 4096
	maxToken         = 256
)

// CheckMetadata checks a sandbox's metadata: at most 64 pairs, keys of 1 to
// 256 bytes and values of at most 4 KiB, valid UTF-8 without NUL.
func CheckMetadata(m map[string]string) error {
	if len(m) > maxMetadata {
		return fmt.Errorf("%w: metadata: at most %d keys", sandbox.ErrInvalid, maxMetadata)
	}
	for k, v := range m {
		switch {
		case k == "" || len(k) > maxMetadataKey:
			return fmt.Errorf("%w: metadata key %q: give 1 to %d bytes", sandbox.ErrInvalid, truncated(k, 40), maxMetadataKey)
		case len(v) > maxMetadataValue:
			return fmt.Errorf("%w: metadata %q: values are at most %d bytes", sandbox.ErrInvalid, truncated(k, 40), maxMetadataValue)
		case !utf8.ValidString(k) || !utf8.ValidString(v) || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
			return fmt.Errorf("%w: metadata %q: keys and values are UTF-8 text without NUL", sandbox.ErrInvalid, truncated(k, 40))
		}
	}
	return nil
}

// truncated shortens s for an error message.
func truncated(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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
	if req.Home != "" {
		s.Home = req.Home
	}
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// claimable says a request can be served by a sandbox made from the
// template as it is: it narrows no limit, adds no environment and asks for
// no other home.
func claimable(t Template, req CreateRequest) bool {
	return req.Limits == (sandbox.Limits{}) && len(req.Env) == 0 && zeroNetwork(req.Network) && len(req.Mounts) == 0 &&
		(req.Home == "" || req.Home == t.Home)
}

// can says whether driver drv has the capability has reads (see
// sandbox/optional.go: the capability is the answer, a type assertion
// only fetches the method).
func (s *Supervisor) can(drv string, has func(sandbox.Capabilities) bool) bool {
	d, ok := s.opts.Drivers[drv]
	return ok && has(d.Capabilities())
}

// memoryOf is what admission and quotas count for a sandbox: the RAM it
// can pin, its memory limit and its tmpfs mounts, and what its driver
// takes beyond them (sandbox.HostBytes).
func (s *Supervisor) memoryOf(rec store.Sandbox) int64 {
	if d, ok := s.opts.Drivers[rec.Driver]; ok {
		return sandbox.HostBytes(d, rec.Spec)
	}
	return rec.Spec.Limits.PinnableBytes()
}

// admit checks the caller's quota and the host's memory, and reserves both
// by registering rec as creating.
func (s *Supervisor) admit(c Caller, rec store.Sandbox) (*live, error) {
	avail, err := s.opts.MemAvailable()
	if err != nil {
		return nil, fmt.Errorf("read the host's available memory: %w", err)
	}
	need := s.memoryOf(rec)
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
		return nil, fmt.Errorf("%w: the sandbox can hold %s of RAM (its memory limit, its /workspace, /tmp and /dev/shm tmpfs, and what its driver takes beyond them) but only %s is free for sandboxes (available %s, %s promised to %d live sandboxes, %s kept in reserve); ask for less memory, disk or tmp, or delete sandboxes",
			ErrCapacity, bytesText(need), bytesText(max(free, 0)), bytesText(avail), bytesText(committed), len(s.live), bytesText(int64(s.cfg.MemoryReserve)))
	}
	fds := s.descriptorsOf(rec)
	if err := s.checkDescriptors(fds); err != nil {
		return nil, err
	}
	if err := checkTasks(); err != nil {
		return nil, err
	}
	l := &live{rec: rec, owner: rec.Owner, mem: need, fds: fds, procs: map[string]*proc{}}
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
		return fmt.Errorf("%w: this key's sandboxes may hold %s of RAM together (memory limits, /workspace, /tmp and /dev/shm tmpfs, and what their drivers take beyond them); %s are held and this sandbox can hold %s: ask for less memory, disk or tmp, or delete a sandbox", ErrQuota, bytesText(q.MaxMemoryBytes), bytesText(mineMem), bytesText(need))
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
	var img ImageRun
	if spec, img, err = s.withImageRoot(ctx, drv.Capabilities(), spec); err != nil {
		return s.driverError(id, err)
	}
	if img.Release != nil {
		defer func() {
			if err != nil {
				img.Release()
			}
		}()
	}
	if err := drv.Capabilities().CheckSpec(l.rec.Driver, spec); err != nil {
		return s.driverError(id, err)
	}
	create := drv.Create
	if l.clone != nil {
		create = l.clone
	}
	inst, err := create(ctx, spec)
	if err != nil {
		return s.driverError(id, err)
	}
	state := store.StateRunning
	if l.rec.Owner == "" {
		state = store.StatePooled
	}
	// What a restarted daemon needs to reattach (see reattach.go).
	var driverState []byte
	if sh, ok := inst.(sandbox.StateHolder); ok && drv.Capabilities().SurvivesRestart {
		if driverState, err = sh.DriverState(); err != nil {
			s.log.Warn("the sandbox's driver state cannot be kept: a restart of the daemon will lose it", "sandbox_id", id, "err", err)
		}
	}
	protocol, _ := agentProtocol(inst)
	rec, err := s.store.UpdateSandbox(id, func(r *store.Sandbox) error {
		r.State, r.DriverState, r.AgentProtocol = state, driverState, protocol
		r.ImageDigest, r.WorkDir = img.Digest, img.WorkingDir
		return nil
	})
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
	l.inst, l.rec, l.releaseImage = inst, rec, img.Release
	l.mu.Unlock()
	s.m.Live.WithLabelValues(rec.Driver).Inc()
	s.log.Info("sandbox created", "sandbox_id", id, "template", rec.Template, "owner", rec.Owner, "state", rec.State)
	s.wg.Add(1)
	go s.watch(l, inst)
	s.tellLifetime(ctx, l)
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

// watch notices a sandbox that ended by itself: its agent, or whatever
// held it (runsc, a container), died.
func (s *Supervisor) watch(l *live, inst sandbox.Instance) {
	defer s.wg.Done()
	select {
	case <-inst.Done():
		l.mu.Lock()
		pausing := l.pausing
		l.mu.Unlock()
		if pausing != nil {
			<-pausing
		}
		l.mu.Lock()
		replaced := l.inst != inst
		l.mu.Unlock()
		if replaced {
			// Paused, or reattached after a pause that failed: the
			// instance that ended is not the sandbox's any more.
			return
		}
		why := "the sandbox ended by itself (what held it exited)"
		if ec, ok := inst.(sandbox.EndCause); ok {
			if err := ec.Ended(); err != nil {
				why = "the sandbox ended by itself: " + err.Error()
			}
		}
		l.mu.Lock()
		exp := l.rec.ExpiresAt
		l.mu.Unlock()
		if !exp.IsZero() && s.opts.Now().After(exp) {
			// Its holder ended it at its TTL (sandbox.LifetimeSetter),
			// before this daemon did.
			s.end(l, "ttl", "its time to live ran out; what held it ended it")
			return
		}
		s.end(l, "error", why)
	case <-s.stop:
	}
}

// agentProtocol is the protocol of inst's agent and whether this airlock
// speaks it; 0 and true for a sandbox without an agent.
func agentProtocol(inst sandbox.Instance) (int, bool) {
	if ai, ok := inst.(sandbox.AgentInstance); ok {
		return ai.AgentProtocol()
	}
	return 0, true
}
