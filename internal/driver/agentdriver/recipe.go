package agentdriver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// What every agent driver does the same way, around how its environment
// starts: its shared options (Shared), the steps of a create (Create:
// validate, defaults, capability check, id, sweep once, lock, rollback)
// and of a reattach after a restart (Reattach: lock probe, handshake,
// version mismatch, egress, exec ids, lifetime). A driver supplies only
// the steps that differ.

// Shared are the options every agent driver takes.
type Shared struct {
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// StateDir holds the sandbox-id locks shared by every driver. Empty
	// means /run/airlock.
	StateDir string
	// CgroupParent is the group below each hierarchy's root that holds the
	// sandboxes. Empty means "airlock" with the default StateDir, and a
	// group of that StateDir's own otherwise (DefaultCgroupParent): a sweep
	// takes a group whose lock is not held in its StateDir for a stale
	// sandbox's, so two state directories must never share one parent.
	CgroupParent string
	// Egress is the proxy that sandboxes in network mode egress reach. Nil
	// means one of the driver's own, with the default limits and no
	// secrets.
	Egress *egress.Proxy
	// Agent is the agent's binary. Empty means the one this airlock ships
	// (agentbin.Path).
	Agent string
	// Persistent makes sandboxes outlive the process that made them, as a
	// daemon's must; only then does a driver reattach (Reattach).
	Persistent bool
}

// DefaultStateDir is the drivers' state directory unless one is given: the
// one every daemon and one-shot run on a host shares.
const DefaultStateDir = "/run/airlock"

// DefaultCgroupParent is the cgroup parent of the drivers whose state
// directory is stateDir: "airlock" for DefaultStateDir, and
// "airlock-HASH" of the directory for any other, so that a driver with a
// state directory of its own (a test's, say) never sweeps the sandboxes of
// another as stale.
func DefaultCgroupParent(stateDir string) string {
	if filepath.Clean(stateDir) == DefaultStateDir {
		return "airlock"
	}
	sum := sha256.Sum256([]byte(filepath.Clean(stateDir)))
	return "airlock-" + hex.EncodeToString(sum[:6])
}

// WithDefaults fills in what is empty. The agent's binary is looked up
// only when needAgent (a driver that hands the binary over by path).
func (s Shared) WithDefaults(needAgent bool) (Shared, error) {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.StateDir == "" {
		s.StateDir = DefaultStateDir
	}
	if s.CgroupParent == "" {
		s.CgroupParent = DefaultCgroupParent(s.StateDir)
	}
	if s.Egress == nil {
		s.Egress = egress.New(egress.Options{Logger: s.Logger})
	}
	if s.Agent == "" && needAgent {
		p, err := agentbin.Path()
		if err != nil {
			return s, err
		}
		s.Agent = p
	}
	return s, nil
}

// Recipe is one agent driver's shared part: its options with their
// defaults, and the create and reattach steps every agent driver takes.
type Recipe struct {
	Shared
	// Driver is the driver's name ("native").
	Driver string
	// Sweep removes what sandboxes of dead airlock processes left (the
	// driver's Sweep). Create runs it once, before the first sandbox, or
	// beside it with SweepBeside.
	Sweep func(context.Context) error
	// SweepBeside runs the sweep beside the first create, within a minute,
	// instead of before it: an engine or a cluster is asked over the
	// network.
	SweepBeside bool

	sweepOnce sync.Once
}

// NewRecipe returns the recipe of driver name with s's defaults filled in
// (the agent's binary looked up when needAgent), whose sweep is sweep.
func NewRecipe(name string, s Shared, needAgent bool, sweep func(context.Context) error) (*Recipe, error) {
	s, err := s.WithDefaults(needAgent)
	if err != nil {
		return nil, err
	}
	return &Recipe{Shared: s, Driver: name, Sweep: sweep}, nil
}

// Steps are a driver's own parts of a create.
type Steps struct {
	// Caps are what the driver can do: a spec that asks more is refused
	// (Capabilities.CheckSpec) before anything is made.
	Caps sandbox.Capabilities
	// Defaults fills in the driver's defaults of a spec whose limits have
	// theirs (an image, a runtime), and refuses what this driver cannot
	// run. Nil: none.
	Defaults func(ctx context.Context, spec *sandbox.Spec) error
	// Start makes the environment of b.Spec and starts its agent, with the
	// sandbox's lock held (b.Lock). It returns the agent's connection
	// after the handshake, and the isolation layers in effect: the host's
	// and the agent's.
	Start StartFunc
}

// StartFunc is a driver's start step (Steps.Start).
type StartFunc func(ctx context.Context, b *Build) (*agent.Client, []sandbox.Layer, error)

// Build is one sandbox being made: what its start step made is undone,
// newest first, when the create fails (gVisor's cleanup.Make/Release).
type Build struct {
	// Spec is the sandbox's spec, its id and defaults set.
	Spec sandbox.Spec
	// Lock is the sandbox's id lock; the host takes it over (Host).
	Lock *hostlock.Lock

	// Run, when set, is the sandbox's first command, started with its
	// agent (a one-shot run's: CreateRun): a start step that can send it
	// with the agent's config does, and says how the host follows it
	// (FollowRun). Its id is the sandbox's first exec's.
	Run *agent.ExecStart

	r    *Recipe
	run  *Run
	host Host
	eg   *egress.Sandbox
	undo []func()
	ctx  context.Context
}

// FollowRun says that the agent was started with b.Run, and how the host
// follows it: open returns the command's stream once it runs (as
// agent.Client.StartExec does), close lets go of it unopened.
func (b *Build) FollowRun(open func(context.Context, *agent.Client) (*agent.Exec, error), close func()) {
	b.run = &Run{Start: b.Run, Open: open, Close: close}
}

// Host names the sandbox's host: a create that fails from here on ends
// with its Teardown, which removes what it made and releases the lock.
func (b *Build) Host(h Host) { b.host = h }

// Undo adds f to what a failed create undoes, before the host's Teardown.
func (b *Build) Undo(f func()) { b.undo = append(b.undo, f) }

// Egress attaches the sandbox to the egress proxy where its network mode
// asks, and says how in cfg (AttachEgress); a failed create detaches it.
func (b *Build) Egress(cfg *agent.Config) error {
	eg, err := AttachEgress(b.r.Egress, b.Spec, cfg)
	b.eg = eg
	return err
}

// rollback undoes what the create made, newest first.
func (b *Build) rollback() {
	if b.run != nil && b.run.Close != nil {
		b.run.Close()
	}
	for i := len(b.undo) - 1; i >= 0; i-- {
		b.undo[i]()
	}
	if b.eg != nil {
		b.eg.Close()
	}
	if b.host != nil {
		_ = b.host.Teardown(context.WithoutCancel(b.ctx))
		return
	}
	b.Lock.Release()
}

// Create makes a sandbox of spec: it checks spec and fills in its
// defaults, sweeps once, takes the sandbox's lock and runs the driver's
// start; anything made before an error is removed again.
func (r *Recipe) Create(ctx context.Context, spec sandbox.Spec, s Steps) (sandbox.Instance, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec.Limits = spec.Limits.WithDefaults()
	// What was asked is checked against what the driver can do before
	// its defaults fill anything in, so that the refusal names the ask.
	if err := s.Caps.CheckSpec(r.Driver, spec); err != nil {
		return nil, err
	}
	if s.Defaults != nil {
		if err := s.Defaults(ctx, &spec); err != nil {
			return nil, err
		}
	}
	if spec.ID == "" {
		spec.ID = sandbox.NewID()
	}
	r.SweepOnce(ctx)
	return r.Make(ctx, spec, s.Start)
}

// CreateRun is Create of a sandbox whose first command is req, sent with
// its agent's config where the driver's start step can (Build.Run): the
// agent starts it as soon as the sandbox is built, and the instance's
// first Start, which must be req, follows it (docs/decisions.md, 91). A
// request that fails its checks is refused before anything is made.
func (r *Recipe) CreateRun(ctx context.Context, spec sandbox.Spec, s Steps, req sandbox.ExecRequest) (sandbox.Instance, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	start := s.Start
	s.Start = func(ctx context.Context, b *Build) (*agent.Client, []sandbox.Layer, error) {
		b.Run = ExecStartOf(FirstExecID, req, b.Spec.Limits)
		return start(ctx, b)
	}
	return r.Create(ctx, spec, s)
}

// SkipSweep takes the sweep as done without running it: a driver made to
// probe the host removes nothing of other sandboxes.
func (r *Recipe) SkipSweep() { r.sweepOnce.Do(func() {}) }

// SweepOnce runs the driver's sweep, the first time only: leftovers of
// airlock processes that died uncleanly (their locks are free) go before
// the first sandbox (a one-shot `airlock run` cleans up after a killed
// one).
func (r *Recipe) SweepOnce(ctx context.Context) {
	if r.Sweep == nil {
		return
	}
	r.sweepOnce.Do(func() {
		if !r.SweepBeside {
			_ = r.Sweep(ctx)
			return
		}
		go func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := r.Sweep(sctx); err != nil {
				r.Logger.Warn("sweep what dead airlock processes left", "driver", r.Driver, "err", err)
			}
		}()
	})
}

// Make takes the lock of spec (checked, its id set), runs start and
// returns the sandbox running; on an error what start made is removed.
func (r *Recipe) Make(ctx context.Context, spec sandbox.Spec, start StartFunc) (_ *Instance, err error) {
	lock, err := hostlock.Sandbox(r.StateDir, spec.ID)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	b := &Build{Spec: spec, Lock: lock, r: r, ctx: ctx}
	defer func() {
		if err != nil {
			b.rollback()
		}
	}()
	client, layers, err := start(ctx, b)
	if err != nil {
		return nil, err
	}
	if b.host == nil {
		client.Close()
		return nil, errors.New("agentdriver: the start step named no host")
	}
	return New(Config{
		Spec: b.Spec, Client: client, Layers: layers,
		Host: b.host, Egress: b.eg, Logger: r.Logger, Run: b.run,
	}), nil
}

// Reattaching is a driver's own part of a reattach.
type Reattaching struct {
	// Spec is the sandbox's spec as its state kept it, limits with
	// defaults.
	Spec sandbox.Spec
	// Created is when the sandbox was made: what is left of its lifetime
	// counts from there. Zero: all of it.
	Created time.Time
	// Host is the sandbox's host, made from its state; Teardown removes
	// all of the sandbox.
	Host Host
	// HolderLocks says the sandbox's holder (its agent, its runsc) holds
	// the sandbox's lock itself: a free lock means the sandbox is gone.
	// False: the lock was the earlier airlock process's, and is taken.
	HolderLocks bool
	// Lock hands the lock, once taken, to the host (whose Teardown
	// releases it).
	Lock func(*hostlock.Lock)
	// Handshake reaches the agent, checks that what answers is the
	// sandbox's own, and performs the agent's handshake (agent.Dial): an
	// error wrapping *agent.VersionError says the agent speaks another
	// protocol.
	Handshake func(ctx context.Context) (*agent.Client, []sandbox.Layer, error)
}

// Reattach reattaches to sandbox id, which an earlier airlock process
// made (sandbox.Recoverer), from its state (DecodeState): a sandbox whose
// holder is gone is removed and not found; one that answers as its own
// is returned running, its egress attached again, its exec ids with a
// prefix of their own and what is left of its lifetime; one whose agent speaks another protocol version is
// returned Mismatched, running on. On any other error nothing of it is
// left.
func (r *Recipe) Reattach(ctx context.Context, id string, p Reattaching) (_ sandbox.Instance, err error) {
	lock, lerr := hostlock.Sandbox(r.StateDir, id)
	switch {
	case lerr == nil && p.HolderLocks:
		// Nobody holds the sandbox's lock: its holder is gone, and with it
		// every process of the sandbox. Remove what is left.
		p.Lock(lock)
		_ = p.Host.Teardown(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("sandbox %s: %w: its agent has exited", id, sandbox.ErrNotFound)
	case lerr == nil:
		p.Lock(lock)
	case p.HolderLocks && errors.Is(lerr, sandbox.ErrExists):
	default:
		return nil, fmt.Errorf("sandbox %s: %w", id, lerr)
	}
	defer func() {
		if err != nil {
			// Whatever holds the sandbox but does not answer as its own is
			// ended, and what it left removed.
			_ = p.Host.Teardown(context.WithoutCancel(ctx))
		}
	}()
	client, layers, err := p.Handshake(ctx)
	var verr *agent.VersionError
	if errors.As(err, &verr) {
		// Made by an airlock of another version: it runs on, and this
		// one can only end it.
		return NewMismatched(p.Spec, p.Host, verr), nil
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("sandbox %s: its agent did not answer; it was ended: %w", id, err)
	}
	inst, err := NewReattached(Config{Spec: p.Spec, Client: client, Layers: layers, Host: p.Host, Logger: r.Logger}, r.Egress, p.Created)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return inst, nil
}

// CanReattach refuses what no reattach can serve: an id that is not one,
// and a driver whose sandboxes die with their process (ErrUnsupported).
func (r *Recipe) CanReattach(id string) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("sandbox id %q: %w", id, sandbox.ErrInvalid)
	}
	if !r.Persistent {
		return &sandbox.UnsupportedError{What: "reattaching a " + r.Driver + " sandbox", Why: "this driver's sandboxes die with the process that made them", Fix: "make the driver with Options.Persistent (as airlock serve does)"}
	}
	return nil
}

// SweepCgroups removes the cgroups below the driver's CgroupParent of
// sandboxes whose lock no live process holds, killing what runs in them
// but spare (see hostlock.SweepStale).
func (r *Recipe) SweepCgroups(hier *cgroup.Hierarchy, spare ...int) {
	if hier == nil {
		return
	}
	parent := hier.Open(r.CgroupParent)
	names, err := parent.Children()
	if err != nil {
		return
	}
	_ = hostlock.SweepStale(r.StateDir, names, func(id string) error {
		g := parent.Child(id)
		_ = g.Kill(5*time.Second, spare...)
		if err := g.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.Logger.Warn("remove a stale sandbox's cgroups", "sandbox_id", id, "err", err)
		}
		return nil
	})
}

// DecodeState is the start of every reattach: it refuses what r cannot
// reattach (CanReattach), reads sandbox id's driver state raw (the JSON of
// a T whose spec is at spec) and returns it with the spec, its limits'
// defaults filled in. An empty state (a create that did not finish) is a
// spec with only the id: enough to end the sandbox.
func DecodeState[T any](r *Recipe, id string, raw []byte, spec func(*T) *sandbox.Spec) (T, sandbox.Spec, error) {
	var st T
	if err := r.CanReattach(id); err != nil {
		return st, sandbox.Spec{}, err
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &st); err != nil || spec(&st).ID != id {
			return st, sandbox.Spec{}, fmt.Errorf("sandbox %s: %w: its driver state does not name it (%w)", id, sandbox.ErrInvalid, err)
		}
	}
	s := *spec(&st)
	if s.ID == "" {
		s = sandbox.Spec{ID: id}
	}
	s.Limits = s.Limits.WithDefaults()
	return st, s, nil
}

// Handshake performs the agent's handshake (agent.Dial) over c within d:
// one that has not finished by then closes c, and its error says so.
func Handshake(ctx context.Context, c net.Conn, d time.Duration) (*agent.Client, []sandbox.Layer, error) {
	return HandshakeAttached(ctx, c, d, nil)
}

// HandshakeAttached is Handshake that sends the attachment a beside it
// (agent.DialAttached); nil: none.
func HandshakeAttached(ctx context.Context, c net.Conn, d time.Duration, a *agent.Attaching) (*agent.Client, []sandbox.Layer, error) {
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	stop := context.AfterFunc(dctx, func() { c.Close() })
	client, layers, err := agent.DialAttached(dctx, c, a)
	stop()
	if err != nil && dctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (the agent did not answer within %v)", err, d)
	}
	return client, layers, err
}
