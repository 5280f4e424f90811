// Package supervisor runs sandboxes for the daemon: it owns the drivers and
// the registry (internal/store), creates sandboxes from templates (claiming
// a warm one from the template's pool when it can), checks each key's
// quotas and the host's memory before it creates, tracks the background
// processes of every sandbox, enforces TTLs and idle timeouts, sweeps
// orphans, and takes its sandboxes up again after a restart.
//
// # Restarts
//
// The sandboxes of a daemon outlive it (a driver that declares
// Capabilities.SurvivesRestart, as native and gVisor do in the daemon):
// a clean stop lets go of them (Detach), a crash or kill -9 just leaves
// them, and the next daemon reattaches to each one from the driver state
// its registry record keeps (Recover, reattach.go), its processes and
// their output included. A sandbox that could not be reattached (whatever
// held it died meanwhile) is recorded as lost; its record stays readable
// (state "lost") for Config.Retention, then it is pruned and GET answers
// 404.
package supervisor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Error classes of the supervisor, besides those of package sandbox.
var (
	// ErrForbidden: the caller may not touch this sandbox or do this.
	ErrForbidden = errors.New("forbidden")
	// ErrQuota: the caller's key has reached one of its quotas.
	ErrQuota = errors.New("quota exceeded")
	// ErrCapacity: the host has not enough room left for the sandbox: memory,
	// the daemon's open files, or the kernel's tasks.
	ErrCapacity = errors.New("not enough room on the host")
	// ErrNotRunning: the sandbox has ended.
	ErrNotRunning = errors.New("sandbox is not running")
	// ErrPaused: the sandbox is paused; resume it first.
	ErrPaused = errors.New("sandbox is paused")
	// ErrBusy: the sandbox has work in flight that the request would cut.
	ErrBusy = errors.New("sandbox is busy")
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
	// Snapshots stores the snapshots of sandboxes' files. Nil: snapshots
	// (and transactional execs, checkpoints, forks) are unsupported.
	Snapshots snapshot.Store
	// Objects is the object store exports write to (the config's
	// [object_store]). Nil: no export.
	Objects *objstore.Client
	// Images unpacks the images of sandboxes whose driver runs an image
	// from its unpacked root (native, gVisor). Nil: those drivers refuse
	// an image.
	Images ImageSource
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
	// Labels are the key's labels, which policy rules and tiers read.
	Labels map[string]string
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

	stored storedCache // paused sandboxes of the object store, for lists (pauselist.go)
	// takeStep, set by tests, is called at each step of a take-up from
	// the object store (pausestore.go's step).
	takeStep func(step string)

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
	// fds are the files it holds open in the daemon (descriptorsOf).
	fds int64

	mu   sync.Mutex
	rec  store.Sandbox
	inst sandbox.Instance // nil while creating
	// ending is set once a kill started; no new work is accepted.
	ending bool
	// releaseImage lets the image cache evict the sandbox's image root
	// (ImageRun.Release); nil without one. Called once, when it ends.
	releaseImage func()

	lastActive atomic.Int64 // unix nanoseconds
	// flushed is the lastActive the registry has (flushActivity).
	flushed atomic.Int64
	busy    atomic.Int32 // foreground execs and file transfers in flight
	execs   atomic.Int64 // execs and processes the policy let run
	exposed exposedPorts // connections to its exposed ports (ports.go)
	cpuRef  cpuSample    // the reference of the next CPU rate (usage.go)
	// mismatch, when set, says why the sandbox only ends: it was
	// reattached after an upgrade and its agent speaks another protocol.
	mismatch string

	// pausing, while a pause runs, is closed when it has ended (guarded
	// by mu): an instance that ends meanwhile may be the pause's doing.
	pausing chan struct{}
	// autoPausing is set while its TTL's pause runs (lifecycle.go).
	autoPausing atomic.Bool
	// clone, when set, starts the sandbox instead of its driver's
	// Create: a live fork's clone (livefork.go).
	clone cloneFunc

	// snapMu serializes the sandbox's snapshots and restores; step counts
	// its checkpoints (rollback.go).
	snapMu sync.Mutex
	step   atomic.Int64

	procs    map[string]*proc
	finished []string // ids of ended processes, oldest first
	// finishedBytes is the output the ended processes keep.
	finishedBytes int64
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
		d, ok := opts.Drivers[t.Driver]
		if !ok {
			return nil, fmt.Errorf("template %q: driver %q is not available in this daemon", t.Name, t.Driver)
		}
		// A template its driver cannot run fails here, not at its first
		// create.
		if err := t.CheckDriver(d); err != nil {
			return nil, err
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
	return append(make([]Template, 0, len(s.cfg.Templates)), s.cfg.Templates...)
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
