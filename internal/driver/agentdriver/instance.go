package agentdriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Config is what a driver hands New once its agent has answered.
type Config struct {
	// Spec is the sandbox's spec, with its ID set and defaults applied.
	Spec sandbox.Spec
	// Client is the agent's connection, after the handshake.
	Client *agent.Client
	// Layers are the isolation layers in effect: the host's and the
	// agent's.
	Layers []sandbox.Layer
	// Host is the driver's side of the environment.
	Host Host
	// Egress is the sandbox's handle on the egress proxy (AttachEgress);
	// nil when the sandbox has no egress.
	Egress *egress.Sandbox
	// Logger receives the instance's logs. Nil discards them.
	Logger *slog.Logger
	// ExecPrefix begins every exec id ("e1", "e2"…). Empty means "e". A
	// sandbox reattached after a restart needs one that its earlier
	// sessions did not use: their execs may still run.
	ExecPrefix string
	// Run, when set, is the command the agent was started with
	// (Build.FollowRun): the first Start follows it.
	Run *Run
}

// Run is a sandbox's first command, started with its agent
// (Recipe.CreateRun).
type Run struct {
	// Start is the command, as the agent was given it.
	Start *agent.ExecStart
	// Open returns its stream once it runs; Close lets go of it unopened.
	Open  func(context.Context, *agent.Client) (*agent.Exec, error)
	Close func()
}

// FirstExecID is the id of a sandbox's first exec.
const FirstExecID = "e1"

// ExecStartOf is the agent's start of req as exec id, in a sandbox of
// limits l.
func ExecStartOf(id string, req sandbox.ExecRequest, l sandbox.Limits) *agent.ExecStart {
	cpu := req.CPUTime
	if cpu == 0 {
		cpu = l.CPUTime
	}
	return &agent.ExecStart{
		ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir,
		TimeoutMS: req.WallTimeout(l).Milliseconds(), CPUTimeMS: cpu.Milliseconds(),
		Background: req.Background, Stdin: req.Stdin != nil, OutputLimit: outputLimit(req, l),
		PTY: req.PTY, OutputBuffer: req.OutputBuffer,
	}
}

// Instance is a sandbox whose agent airlock talks to: exec, files, egress
// and the checks of what the agent says, for every agent driver.
type Instance struct {
	spec   sandbox.Spec
	client *agent.Client
	layers []sandbox.Layer
	host   Host
	egress *egress.Sandbox
	log    *slog.Logger

	egressStop context.CancelFunc
	lifetime   *time.Timer
	execPrefix string

	// run is the command the agent was started with, until the first
	// Start takes it.
	run atomic.Pointer[Run]

	execSeq   atomic.Int64
	mu        sync.Mutex
	procs     map[string]*process
	closed    bool
	closeOnce sync.Once
	closeErr  error
	// detached is set once Detach let go of the sandbox.
	detached atomic.Bool
	// listed is what the last Processes found, by id.
	listed map[string]agent.ExecInfo
}

var (
	_ sandbox.Instance        = (*Instance)(nil)
	_ sandbox.UsageReader     = (*Instance)(nil)
	_ sandbox.StateHolder     = (*Instance)(nil)
	_ sandbox.Detacher        = (*Instance)(nil)
	_ sandbox.ProcessAttacher = (*Instance)(nil)
	_ sandbox.AgentInstance   = (*Instance)(nil)
	_ sandbox.EndCause        = (*Instance)(nil)
	_ sandbox.CowMounter      = (*Instance)(nil)
	_ egress.Reporter         = (*Instance)(nil)
	_ sandbox.NetworkChanger  = (*Instance)(nil)
)

// New returns the sandbox running: its egress tunnels serve, and its
// lifetime runs.
func New(cfg Config) *Instance {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	in := &Instance{
		spec: cfg.Spec, client: cfg.Client, layers: cfg.Layers, host: cfg.Host, egress: cfg.Egress,
		log: cfg.Logger.With("sandbox_id", cfg.Spec.ID), procs: map[string]*process{}, execPrefix: cfg.ExecPrefix,
	}
	if in.execPrefix == "" {
		in.execPrefix = "e"
	}
	// Exec ids go on from the highest the agent has seen: a reattached
	// sandbox's earlier execs may still run.
	in.execSeq.Store(cfg.Client.Hello().ExecSeq)
	if cfg.Run != nil {
		// Its id is taken, whether or not the agent had started it by
		// the handshake.
		in.execSeq.Store(max(in.execSeq.Load(), 1))
		in.run.Store(cfg.Run)
	}
	in.startEgress()
	if l := cfg.Spec.Limits.Lifetime; l > 0 {
		in.lifetime = time.AfterFunc(l, func() {
			in.log.Info("sandbox lifetime reached")
			_ = in.Close(context.Background())
		})
		// The agent of a sandbox that outlives this process ends it at
		// this lifetime if nobody is attached then (SetLifetime).
		if err := in.SetLifetime(context.Background(), l, 0, 0); err != nil {
			in.log.Warn("tell the sandbox's agent its lifetime", "err", err)
		}
	}
	return in
}

// ID is the sandbox's id.
func (in *Instance) ID() string { return in.spec.ID }

// Layers lists the isolation layers in effect.
func (in *Instance) Layers() []sandbox.Layer { return append([]sandbox.Layer(nil), in.layers...) }

// Done is closed once the sandbox has ended.
func (in *Instance) Done() <-chan struct{} { return in.host.Done() }

// Host is the driver's side of the sandbox.
func (in *Instance) Host() Host { return in.host }

// Files is the sandbox's file API, served by its agent.
func (in *Instance) Files() sandbox.Files { return files{in: in, api: in.client.Files()} }

// Usage reads what the whole sandbox uses now, where the host can see it.
func (in *Instance) Usage(ctx context.Context) (sandbox.SandboxUsage, error) {
	if u, ok := in.host.(sandbox.UsageReader); ok {
		return u.Usage(ctx)
	}
	return sandbox.SandboxUsage{}, fmt.Errorf("usage of sandbox %s: %w", in.spec.ID, sandbox.ErrUnsupported)
}

// CowLayers lists the sandbox's copy-on-write mounts, where the host
// keeps them (none when the driver makes none).
func (in *Instance) CowLayers() []sandbox.CowLayer {
	if c, ok := in.host.(sandbox.CowMounter); ok {
		return c.CowLayers()
	}
	return nil
}

// Start starts req and returns at once.
func (in *Instance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := in.usable(); err != nil {
		return nil, err
	}
	// The command the agent was started with is the first Start's.
	run := in.run.Swap(nil)
	var st *agent.ExecStart
	if run != nil {
		st = run.Start
	} else {
		st = ExecStartOf(in.execPrefix+strconv.FormatInt(in.execSeq.Add(1), 10), req, in.spec.Limits)
	}
	id := st.ID
	timeout, cpu := time.Duration(st.TimeoutMS)*time.Millisecond, time.Duration(st.CPUTimeMS)*time.Millisecond
	p := &process{in: in, id: id, timeout: timeout, cpuTime: cpu, outputLimit: st.OutputLimit, background: st.Background, pty: st.PTY != nil, done: make(chan struct{}), eh: in.host.Exec(id)}
	// The stream lives as long as the exec, not as long as ctx.
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	// An agent that does not start the command in time is an error, not a
	// hang; the stream then ends with it.
	var late atomic.Bool
	timer := time.AfterFunc(agent.CallTimeout, func() { late.Store(true); cancel() })
	var ex *agent.Exec
	var err error
	if run != nil {
		ex, err = run.Open(sctx, in.client)
	} else {
		ex, err = in.client.StartExec(sctx, st)
	}
	timer.Stop()
	stop()
	if err != nil {
		cancel()
		p.eh.Abandon()
		var ce *sandbox.CommandError
		if !errors.As(err, &ce) {
			// The exec outlives its stream in the agent: one the agent may
			// have started is killed by id.
			go in.killLost(ctx, id)
		}
		if late.Load() {
			return nil, fmt.Errorf("exec %s: the sandbox's agent did not start the command within %v: %w", id, agent.CallTimeout, err)
		}
		// A broken connection is a dead sandbox (say why) or a broken agent.
		if !errors.As(err, &ce) && ctx.Err() == nil && in.waitDone(2*time.Second) {
			return nil, in.endedError()
		}
		return nil, err
	}
	if err := p.eh.Started(ex.Cgroup); err != nil {
		ex.Close()
		cancel()
		p.eh.Abandon()
		return nil, fmt.Errorf("exec %s: %w", id, err)
	}
	p.ex, p.started = ex, time.Now()
	in.mu.Lock()
	in.procs[id] = p
	in.mu.Unlock()
	if req.Stdin != nil {
		go ex.FeedStdin(req.Stdin)
	}
	go p.run(req.Stdout, req.Stderr)
	return p, nil
}

// usable says why the instance takes no new work, if it does not.
func (in *Instance) usable() error {
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	switch {
	case closed:
		return sandbox.ErrClosed
	case in.detached.Load():
		return fmt.Errorf("sandbox %s: %w", in.spec.ID, sandbox.ErrDetached)
	case in.isDone():
		return in.endedError()
	}
	return nil
}

// killLost kills exec id, whose start the host gave up on.
func (in *Instance) killLost(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = in.client.Signal(ctx, id, int(syscall.SIGKILL))
}

// forget tells the agent that the host has exec id's result, so that it
// no longer keeps it.
func (in *Instance) forgetExec(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = in.client.Forget(ctx, id)
}

// Close kills everything in the sandbox and removes what it made on the
// host. It runs once; later calls return the first result.
func (in *Instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.mu.Lock()
		in.closed = true
		in.mu.Unlock()
		if in.lifetime != nil {
			in.lifetime.Stop()
		}
		in.stopEgress()
		if run := in.run.Swap(nil); run != nil && run.Close != nil {
			run.Close()
		}
		// The connection ends; the host's teardown kills the agent (a
		// one-shot run's agent also kills every command and exits when it
		// ends).
		in.client.Close()
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		in.closeErr = in.host.Teardown(tctx)
	})
	return in.closeErr
}

// isDone says whether the sandbox has ended.
func (in *Instance) isDone() bool {
	select {
	case <-in.host.Done():
		return true
	default:
		return false
	}
}

// waitDone waits up to d for the sandbox to end, and says whether it did.
func (in *Instance) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-in.host.Done():
		return true
	case <-t.C:
		return false
	}
}

// endedError is the error of every call on a sandbox that has ended.
func (in *Instance) endedError() error {
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if dt := in.host.Ended(); dt != nil && !closed {
		return fmt.Errorf("sandbox %s ended: %s: %w", in.spec.ID, dt.Msg, sandbox.ErrClosed)
	}
	return sandbox.ErrClosed
}

// forget drops a finished exec.
func (in *Instance) forget(id string) {
	in.mu.Lock()
	delete(in.procs, id)
	in.mu.Unlock()
}

// outputLimit is the most each output stream of req may print before it
// is killed: the sandbox's output limit for a foreground command, none for
// a background one (whose reader keeps what it wants of it: the daemon's
// rings keep the latest output).
func outputLimit(req sandbox.ExecRequest, l sandbox.Limits) int64 {
	if req.Background {
		return 0
	}
	return l.OutputBytes
}
