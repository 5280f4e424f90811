package supervisor

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Live fork (sandbox.LiveForker): running copies of a running sandbox.
// Its driver saves it without stopping it into the state directory's
// forks/ID, and starts each clone from that image, with an identity of
// its own; the image is removed once the clones run. Each clone is
// admitted (the host's memory, the caller's quota, the policy) as a
// create of the source's template and spec would be, before the save.

// MaxLiveForks is the most clones one live fork makes.
const MaxLiveForks = 16

// LiveForkRequest asks for Count running copies of sandbox Sandbox.
type LiveForkRequest struct {
	Sandbox string
	// Count is how many clones; zero means one.
	Count int
	// TTL is each clone's lifetime; zero means the template's.
	TTL time.Duration
	// Metadata labels the clones; nil means the source's.
	Metadata map[string]string
}

// LiveForkResult are the clones, and what the save took.
type LiveForkResult struct {
	Source    string
	Sandboxes []Info
	// ImageBytes is the size of the image the clones started from.
	ImageBytes int64
	// Checkpoint is how long the source's save took.
	Checkpoint time.Duration
}

// LiveFork makes running copies of sandbox r.Sandbox, which runs on. A
// driver without live fork is refused with its reason (ErrUnsupported);
// a sandbox with a foreground exec or a file transfer in flight is
// refused (ErrBusy). Either every clone starts or none is kept.
func (s *Supervisor) LiveFork(ctx context.Context, c Caller, r LiveForkRequest) (LiveForkResult, error) {
	ctx, done, err := s.Begin(ctx, c, OpCreate)
	if err != nil {
		return LiveForkResult{}, err
	}
	defer done()
	n := r.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxLiveForks {
		return LiveForkResult{}, fmt.Errorf("%w: count %d: a live fork makes 1 to %d sandboxes", sandbox.ErrInvalid, r.Count, MaxLiveForks)
	}
	l, err := s.lookup(c, r.Sandbox)
	if err != nil {
		return LiveForkResult{}, err
	}
	l.mu.Lock()
	src, inst := l.rec, l.inst
	l.mu.Unlock()
	drv := s.opts.Drivers[src.Driver]
	if err := drv.Capabilities().CheckLiveFork(src.Driver); err != nil {
		return LiveForkResult{}, err
	}
	lf, ok := drv.(sandbox.LiveForker)
	if !ok {
		return LiveForkResult{}, fmt.Errorf("live fork of sandbox %s: %w: its driver %s cannot copy it here", src.ID, sandbox.ErrUnsupported, src.Driver)
	}
	if inst == nil || l.mismatch != "" {
		return LiveForkResult{}, fmt.Errorf("sandbox %s: %w: it is not running here", src.ID, ErrNotRunning)
	}
	if err := CheckMetadata(r.Metadata); err != nil {
		return LiveForkResult{}, err
	}
	t, ok := s.templates[src.Template]
	if !ok {
		return LiveForkResult{}, fmt.Errorf("%w: template %q of sandbox %s does not exist any more", sandbox.ErrNotFound, src.Template, src.ID)
	}
	ttl := time.Duration(t.TTL)
	if r.TTL > 0 {
		ttl = r.TTL
	}
	if r.TTL < 0 || ttl > time.Duration(t.MaxTTL) {
		return LiveForkResult{}, fmt.Errorf("%w: ttl %s: template %q allows 1s to %s", sandbox.ErrInvalid, r.TTL, t.Name, time.Duration(t.MaxTTL))
	}
	spec := src.Spec
	if err := s.decide(ctx, c, policy.Request{Action: policy.ActionCreate, Template: src.Template, Driver: src.Driver, Limits: &spec.Limits, Network: &spec.Network,
		Image: spec.Image, Labels: c.Labels}); err != nil {
		return LiveForkResult{}, err
	}
	meta := r.Metadata
	if meta == nil {
		meta = src.Metadata
	}
	// Every clone is admitted before the source is saved.
	clones := make([]*live, 0, n)
	release := func() {
		s.mu.Lock()
		for _, cl := range clones {
			delete(s.live, cl.rec.ID)
		}
		s.mu.Unlock()
	}
	now := s.opts.Now()
	for range n {
		rec := store.Sandbox{
			ID: newID(), Owner: c.KeyID, Template: src.Template, Driver: src.Driver, Spec: spec,
			DriverRule: src.DriverRule, DriverReason: "a live fork of sandbox " + src.ID,
			State: store.StateCreating, Created: now.UTC(), ExpiresAt: now.Add(ttl).UTC(), IdleTimeout: src.IdleTimeout,
			Metadata: maps.Clone(meta),
		}
		cl, err := s.admit(c, rec)
		if err != nil {
			release()
			s.m.Creates.WithLabelValues(src.Template, "refused").Inc()
			return LiveForkResult{}, err
		}
		clones = append(clones, cl)
	}
	dir := filepath.Join(s.cfg.StateDir, "forks", newID())
	defer func() {
		if r, ok := lf.(sandbox.CheckpointReleaser); ok {
			r.ReleaseCheckpoint(dir)
		}
		os.RemoveAll(dir)
	}()
	state, took, err := s.checkpoint(ctx, l, lf, dir)
	if err != nil {
		release()
		return LiveForkResult{}, err
	}
	size, _ := sizeDir(dir)
	// The clones start together from the one image.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cl := range clones {
		cl.clone = func(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
			return lf.Clone(ctx, spec, state, dir)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.start(ctx, cl)
		}()
	}
	wg.Wait()
	res := LiveForkResult{Source: src.ID, ImageBytes: size, Checkpoint: took}
	var failed error
	for i, cl := range clones {
		if errs[i] != nil {
			failed = errs[i]
			s.m.Creates.WithLabelValues(src.Template, "error").Inc()
			continue
		}
		res.Sandboxes = append(res.Sandboxes, s.info(cl))
	}
	if failed != nil {
		for _, in := range res.Sandboxes {
			_ = s.Kill(context.WithoutCancel(ctx), c, in.ID)
		}
		return LiveForkResult{}, fmt.Errorf("live fork of sandbox %s: %w", src.ID, failed)
	}
	for i, in := range res.Sandboxes {
		s.m.Creates.WithLabelValues(src.Template, "ok").Inc()
		s.recordAfter(ctx, audit.Event{Kind: audit.KindFork, Key: c.KeyID, Sandbox: in.ID, Template: src.Template,
			Reason: fmt.Sprintf("live fork %d of %d of sandbox %s (saved running in %v, %d bytes)", i+1, n, src.ID, took.Round(time.Millisecond), size)})
	}
	s.log.Info("sandbox forked live", "sandbox_id", src.ID, "clones", n, "checkpoint", took)
	return res, nil
}

// checkpoint has l's driver save it running into dir, and puts back the
// instance it runs on afterwards.
func (s *Supervisor) checkpoint(ctx context.Context, l *live, lf sandbox.LiveForker, dir string) ([]byte, time.Duration, error) {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	l.mu.Lock()
	inst, id, ending := l.inst, l.rec.ID, l.ending
	l.mu.Unlock()
	if inst == nil || ending {
		return nil, 0, fmt.Errorf("sandbox %s: %w", id, ErrNotRunning)
	}
	if n := l.busy.Load(); n > 0 {
		return nil, 0, fmt.Errorf("%w: sandbox %s has %d foreground execs or file transfers in flight: fork it once they end", ErrBusy, id, n)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("live fork of sandbox %s: make its image's directory: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	// The instance that ends while its driver lets go of it is not the
	// sandbox's end (watch waits for this).
	saving := make(chan struct{})
	l.mu.Lock()
	l.pausing = saving
	l.mu.Unlock()
	started := time.Now()
	state, back, err := lf.Checkpoint(ctx, inst, dir)
	took := time.Since(started)
	switch {
	case back == nil:
		s.end(l, "error", "it was lost while being saved for a live fork")
	case back != inst:
		l.mu.Lock()
		l.inst = back
		l.mu.Unlock()
		s.wg.Add(1)
		go s.watch(l, back)
		s.reattachProcs(context.WithoutCancel(ctx), l)
	}
	l.mu.Lock()
	l.pausing = nil
	l.mu.Unlock()
	close(saving)
	if err != nil {
		return nil, took, s.pauseError(id, err)
	}
	return state, took, nil
}

// cloneFunc starts a live fork's clone as spec says (live.clone).
type cloneFunc func(context.Context, sandbox.Spec) (sandbox.Instance, error)
