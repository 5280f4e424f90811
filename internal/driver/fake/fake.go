// Package fake is an in-memory driver for tests of what sits above the
// drivers (the supervisor, the API, MCP): sandboxes without processes whose
// commands are a few built-ins, with an in-memory file tree. It isolates
// nothing and runs nowhere but in tests.
//
// Commands: "cat" copies stdin to stdout; "true" and "false" exit 0 and 1;
// "exit N" exits N; "sleep" runs until it is signalled or the sandbox
// closes; "stty" prints the size of its terminal ("ROWS COLS") and fails
// without one; "write PATH TEXT [CODE]" writes TEXT to the file PATH and
// exits CODE (0 by default); anything else ("echo ARGS…", "python3 -c
// CODE") prints its arguments and exits 0. A "terminal" (ExecRequest.PTY)
// is only its size, which Resize changes; its output goes to Stdout.
package fake

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver makes in-memory sandboxes. Its exported fields may be set before
// use; the counters may be read at any time.
type Driver struct {
	// DriverName is what Name returns; empty means "native", the driver a
	// template names by default.
	DriverName string
	// Fail, when set, is what Create returns.
	Fail error
	// Pausable makes its sandboxes pausable with their memory
	// (sandbox.Pauser; pause.go).
	Pausable bool
	// Freezable makes its sandboxes pausable by a freeze, their memory
	// kept in the host (sandbox.Freezer; pause.go).
	Freezable bool
	// Ports, when set, is what its sandboxes' DialPort does (an exposed
	// port); nil refuses it as unsupported.
	Ports func(ctx context.Context, port int) (net.Conn, error)
	// LiveForkable makes its sandboxes copyable running
	// (sandbox.LiveForker; livefork.go).
	LiveForkable bool
	// CloneFail, when set, is every live fork clone's error.
	CloneFail error
	// Created, Closed, Swept, PausedCount (pauses) and Discarded count calls.
	Created, Closed, Swept, PausedCount, Discarded atomic.Int32

	mu     sync.Mutex
	paused map[string]*tree // the trees of paused sandboxes, by id
	images map[string]*tree // the trees of live forks' checkpoints, by source id
	specs  []sandbox.Spec
	hook   func(ctx context.Context, spec sandbox.Spec) error
}

var (
	_ sandbox.Driver  = (*Driver)(nil)
	_ sandbox.Sweeper = (*Driver)(nil)
)

// Name is DriverName, or "native".
func (d *Driver) Name() string {
	if d.DriverName == "" {
		return "native"
	}
	return d.DriverName
}

// Probe succeeds.
func (d *Driver) Probe(context.Context) error { return nil }

// Capabilities are those of a Linux driver, without egress.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true, PTY: true, Snapshots: true, Home: true, Pause: d.Pausable || d.Freezable, MemoryKeptInHost: d.Freezable, LiveFork: d.LiveForkable}
}

// Sweep counts.
func (d *Driver) Sweep(context.Context) error { d.Swept.Add(1); return nil }

// OnCreate sets a function every Create calls first (to delay it, or make
// it fail); nil removes it.
func (d *Driver) OnCreate(f func(ctx context.Context, spec sandbox.Spec) error) {
	d.mu.Lock()
	d.hook = f
	d.mu.Unlock()
}

// Specs returns the specs of every sandbox made so far.
func (d *Driver) Specs() []sandbox.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]sandbox.Spec(nil), d.specs...)
}

// Create makes a sandbox.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if d.Fail != nil {
		return nil, d.Fail
	}
	d.mu.Lock()
	hook := d.hook
	d.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, spec); err != nil {
			return nil, err
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = sandbox.NewID()
	}
	spec.Limits = spec.Limits.WithDefaults()
	d.mu.Lock()
	d.specs = append(d.specs, spec)
	d.mu.Unlock()
	d.Created.Add(1)
	return &Instance{d: d, spec: spec, done: make(chan struct{}), files: newTree(spec.Home)}, nil
}

// Instance is an in-memory sandbox.
type Instance struct {
	d     *Driver
	spec  sandbox.Spec
	seq   atomic.Int32
	once  sync.Once
	done  chan struct{}
	files *tree

	mu       sync.Mutex
	frozen   bool
	lifetime [3]time.Duration // the last SetLifetime's left, idle and idleFor
}

var _ sandbox.Instance = (*Instance)(nil)

func (in *Instance) ID() string              { return in.spec.ID }
func (in *Instance) Layers() []sandbox.Layer { return []sandbox.Layer{sandbox.LayerUserNS} }
func (in *Instance) Files() sandbox.Files    { return in.files }
func (in *Instance) Done() <-chan struct{}   { return in.done }

// Close ends the sandbox and every command in it.
func (in *Instance) Close(context.Context) error {
	in.once.Do(func() { in.d.Closed.Add(1); close(in.done) })
	return nil
}

// Start runs one of the built-in commands.
func (in *Instance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	select {
	case <-in.done:
		return nil, sandbox.ErrClosed
	default:
	}
	p := &process{id: "e" + strconv.Itoa(int(in.seq.Add(1))), done: make(chan struct{}), sig: make(chan syscall.Signal, 1)}
	if req.PTY != nil {
		sz := *req.PTY
		p.size = &sz
	}
	go p.run(in, req) //nolint:gosec // the process outlives the request that started it
	return p, nil
}

type process struct {
	id   string
	done chan struct{}
	sig  chan syscall.Signal
	res  sandbox.Result

	mu   sync.Mutex
	size *sandbox.TermSize // nil without a terminal
}

var _ sandbox.Resizer = (*process)(nil)

// Resize changes the size of the process's terminal.
func (p *process) Resize(_ context.Context, size sandbox.TermSize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size == nil {
		return fmt.Errorf("exec %s has no terminal: %w", p.id, sandbox.ErrInvalid)
	}
	select {
	case <-p.done:
		return fmt.Errorf("exec %s has ended: %w", p.id, sandbox.ErrNotFound)
	default:
	}
	p.size = &size
	return nil
}

func (p *process) run(in *Instance, req sandbox.ExecRequest) {
	defer close(p.done)
	exit := func(code int) {
		p.res = sandbox.Result{ExitCode: code, Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{}}
	}
	switch req.Argv[0] {
	case "cat":
		if req.Stdin != nil && req.Stdout != nil {
			_, _ = io.Copy(req.Stdout, req.Stdin)
		}
		exit(0)
	case "true":
		exit(0)
	case "stty":
		p.mu.Lock()
		size := p.size
		p.mu.Unlock()
		if size == nil {
			if req.Stderr != nil {
				_, _ = io.WriteString(req.Stderr, "stty: 'standard input': Inappropriate ioctl for device\n")
			}
			exit(1)
			return
		}
		if req.Stdout != nil {
			_, _ = fmt.Fprintf(req.Stdout, "%d %d\n", size.Rows, size.Cols)
		}
		exit(0)
	case "false":
		exit(1)
	case "write":
		code := 0
		if len(req.Argv) < 3 {
			exit(2)
			return
		}
		if len(req.Argv) > 3 {
			code, _ = strconv.Atoi(req.Argv[3])
		}
		if err := in.files.WriteFile(context.Background(), req.Argv[1], strings.NewReader(req.Argv[2]), 0o644); err != nil {
			if req.Stderr != nil {
				_, _ = io.WriteString(req.Stderr, err.Error()+"\n")
			}
			code = 1
		}
		exit(code)
	case "exit":
		code := 0
		if len(req.Argv) > 1 {
			code, _ = strconv.Atoi(req.Argv[1])
		}
		exit(code)
	case "sleep":
		select {
		case sig := <-p.sig:
			p.res = sandbox.Result{ExitCode: -1, Signal: sandbox.SignalName(sig), Reason: sandbox.ReasonKilled, LimitsHit: []sandbox.Limit{}}
		case <-in.done:
			p.res = sandbox.Result{ExitCode: -1, Signal: "SIGKILL", Reason: sandbox.ReasonKilled, LimitsHit: []sandbox.Limit{}, Message: "the sandbox was closed while the command ran"}
		}
	default: // echo, and any other command
		if req.Stdout != nil {
			_, _ = io.WriteString(req.Stdout, strings.Join(req.Argv[1:], " ")+"\n")
		}
		exit(0)
	}
}

func (p *process) ID() string { return p.id }

func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, nil
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
}

// Signal ends a running "sleep" with sig.
func (p *process) Signal(_ context.Context, sig syscall.Signal) error {
	select {
	case p.sig <- sig:
	default:
	}
	return nil
}

// String names the sandbox, for test failures.
func (in *Instance) String() string { return fmt.Sprintf("fake sandbox %s", in.spec.ID) }

// DialPort is Driver.Ports.
func (in *Instance) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if in.d.Ports == nil {
		return nil, fmt.Errorf("the fake driver cannot reach a port inside its sandboxes (no Driver.Ports): %w", sandbox.ErrUnsupported)
	}
	return in.d.Ports(ctx, port)
}
