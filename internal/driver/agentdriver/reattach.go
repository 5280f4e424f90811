package agentdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// What a driver whose sandboxes outlive the daemon needs of the host side:
// letting go of a sandbox (Detach), the state to reattach with, the
// commands that ran on meanwhile (Processes, Attach), and a sandbox whose
// agent speaks another protocol (Mismatched).

// NewReattached is New for a sandbox that this process reattached to over
// cfg.Client, made by an earlier one at created: its egress is attached to
// proxy again (network mode egress), its lifetime is what is left of it (at
// least a second), and its exec ids get a prefix of their own, as the
// earlier sessions' may still run. On error cfg.Client is closed.
func NewReattached(cfg Config, proxy *egress.Proxy, created time.Time) (*Instance, error) {
	if cfg.Spec.Network.Mode == sandbox.NetworkEgress {
		eg, err := proxy.Attach(cfg.Spec.ID, cfg.Spec.Network)
		if err != nil {
			cfg.Client.Close()
			return nil, err
		}
		cfg.Egress = eg
	}
	if !created.IsZero() && cfg.Spec.Limits.Lifetime > 0 {
		cfg.Spec.Limits.Lifetime = max(cfg.Spec.Limits.Lifetime-time.Since(created), time.Second)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	cfg.ExecPrefix = "r" + hex.EncodeToString(b[:]) + "-"
	return New(cfg), nil
}

// HostDetacher is a Host that can let go of its environment without ending
// it: it stops watching it and drops what this process holds of it (its
// copies of the locks, without removing them).
type HostDetacher interface {
	Detach()
}

// HostState is a Host that can say what a later process needs to reattach
// to its environment (see sandbox.StateHolder).
type HostState interface {
	DriverState() ([]byte, error)
}

// DriverState is the host's state to reattach with; nil when the host has
// none (its sandbox dies with this process).
func (in *Instance) DriverState() ([]byte, error) {
	if hs, ok := in.host.(HostState); ok && in.client.Hello().Persistent {
		return hs.DriverState()
	}
	return nil, nil
}

// AgentProtocol is the agent's protocol version, this airlock's own.
func (in *Instance) AgentProtocol() (int, bool) { return agent.Version, true }

// Ended says why the sandbox ended by itself, once it has.
func (in *Instance) Ended() error {
	if !in.isDone() {
		return nil
	}
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if dt := in.host.Ended(); dt != nil && !closed {
		return errors.New(dt.Msg)
	}
	return nil
}

// Detach lets go of the sandbox: the egress tunnels and the agent
// connection close and the host stops watching, but the sandbox and its
// commands run on for a later process to reattach to. Processes still
// running end their Wait with sandbox.ErrDetached. A sandbox whose agent
// does not outlive its connection (a one-shot run's) is closed instead.
func (in *Instance) Detach(ctx context.Context) error {
	hd, ok := in.host.(HostDetacher)
	if !ok || !in.client.Hello().Persistent {
		return in.Close(ctx)
	}
	var err error
	in.closeOnce.Do(func() {
		in.detached.Store(true)
		in.mu.Lock()
		in.closed = true
		in.mu.Unlock()
		if in.lifetime != nil {
			in.lifetime.Stop()
		}
		in.stopEgress()
		err = in.client.Close()
		hd.Detach()
	})
	return err
}

// Processes lists the commands the agent holds: those running, and those
// that ended without this airlock collecting their result.
func (in *Instance) Processes(ctx context.Context) ([]sandbox.ProcessState, error) {
	if err := in.usable(); err != nil {
		return nil, err
	}
	list, err := in.client.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the processes of %s: %w", in.spec.ID, err)
	}
	out := make([]sandbox.ProcessState, 0, len(list))
	listed := map[string]agent.ExecInfo{}
	for _, e := range list {
		if !sandbox.ValidID(e.ID) || len(e.Argv) == 0 {
			continue // the agent's word: an id must be usable
		}
		listed[e.ID] = e
		out = append(out, sandbox.ProcessState{
			ID: e.ID, Argv: e.Argv, Started: time.UnixMilli(e.StartedMS).UTC(), Background: e.Background,
			PTY: e.PTY, Stdin: e.Stdin, Result: e.Result,
		})
	}
	in.mu.Lock()
	in.listed = listed
	in.mu.Unlock()
	return out, nil
}

// Attach follows process id, which Processes listed.
func (in *Instance) Attach(ctx context.Context, id string, req sandbox.AttachRequest) (sandbox.Process, error) {
	if err := in.usable(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	e, ok := in.listed[id]
	in.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("process %s of sandbox %s: %w", id, in.spec.ID, sandbox.ErrNotFound)
	}
	p := &process{in: in, id: id, timeout: time.Duration(e.TimeoutMS) * time.Millisecond, cpuTime: time.Duration(e.CPUTimeMS) * time.Millisecond, outputLimit: e.OutputLimit,
		background: e.Background, pty: e.PTY != nil, done: make(chan struct{}), eh: in.host.Exec(id)}
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	keepInput := e.Stdin && req.Stdin != nil || e.PTY != nil
	ex, err := in.client.AttachExec(sctx, &agent.ExecAttach{ID: id}, keepInput, e.PTY != nil)
	stop()
	if err != nil {
		cancel()
		p.eh.Abandon()
		return nil, err
	}
	if err := p.eh.Started(ex.Cgroup); err != nil {
		ex.Close()
		cancel()
		p.eh.Abandon()
		return nil, fmt.Errorf("exec %s: %w", id, err)
	}
	if req.Offsets != nil {
		req.Offsets(ex.StdoutOffset, ex.StderrOffset)
	}
	p.ex, p.started = ex, time.UnixMilli(e.StartedMS)
	in.mu.Lock()
	in.procs[id] = p
	in.mu.Unlock()
	if e.Stdin && req.Stdin != nil {
		go ex.FeedStdin(req.Stdin)
	}
	go p.run(req.Stdout, req.Stderr)
	return p, nil
}

// Mismatched is a sandbox reattached after an upgrade whose agent speaks
// another protocol version than this airlock: it runs on, its host can end
// it (Close), and every other call says why it cannot.
type Mismatched struct {
	spec sandbox.Spec
	host Host
	verr *agent.VersionError
}

var (
	_ sandbox.Instance      = (*Mismatched)(nil)
	_ sandbox.AgentInstance = (*Mismatched)(nil)
	_ sandbox.StateHolder   = (*Mismatched)(nil)
	_ sandbox.Detacher      = (*Mismatched)(nil)
	_ sandbox.EndCause      = (*Mismatched)(nil)
	_ sandbox.Snapshotter   = (*Mismatched)(nil)
)

// NewMismatched returns the sandbox of spec whose agent answered with verr.
func NewMismatched(spec sandbox.Spec, host Host, verr *agent.VersionError) *Mismatched {
	return &Mismatched{spec: spec, host: host, verr: verr}
}

// Err is the error of every call but Close.
func (m *Mismatched) Err() error {
	return fmt.Errorf("sandbox %s: %w: %w; it runs until its time to live ends or it is deleted; use it from an airlock of its version", m.spec.ID, sandbox.ErrMismatch, m.verr)
}

func (m *Mismatched) ID() string                 { return m.spec.ID }
func (m *Mismatched) Layers() []sandbox.Layer    { return nil }
func (m *Mismatched) Files() sandbox.Files       { return failFiles{m.Err()} }
func (m *Mismatched) Done() <-chan struct{}      { return m.host.Done() }
func (m *Mismatched) AgentProtocol() (int, bool) { return m.verr.Agent, false }

func (m *Mismatched) Start(context.Context, sandbox.ExecRequest) (sandbox.Process, error) {
	return nil, m.Err()
}

func (m *Mismatched) Capture(context.Context, sandbox.CaptureRequest, sandbox.BlobPut) (sandbox.Capture, error) {
	return sandbox.Capture{}, m.Err()
}

func (m *Mismatched) Apply(context.Context, sandbox.ApplyRequest, sandbox.BlobGet) (sandbox.ApplyStats, error) {
	return sandbox.ApplyStats{}, m.Err()
}

// Close ends the sandbox from the host, without its agent.
func (m *Mismatched) Close(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return m.host.Teardown(tctx)
}

// Detach lets go of it.
func (m *Mismatched) Detach(context.Context) error {
	if hd, ok := m.host.(HostDetacher); ok {
		hd.Detach()
	}
	return nil
}

// DriverState is the host's state.
func (m *Mismatched) DriverState() ([]byte, error) {
	if hs, ok := m.host.(HostState); ok {
		return hs.DriverState()
	}
	return nil, nil
}

// Ended says why the sandbox ended by itself.
func (m *Mismatched) Ended() error {
	if dt := m.host.Ended(); dt != nil {
		return errors.New(dt.Msg)
	}
	return nil
}

// failFiles is a file API whose every call fails with err.
type failFiles struct{ err error }

func (f failFiles) ReadFile(context.Context, string, int64, int64, io.Writer) error { return f.err }
func (f failFiles) WriteFile(context.Context, string, io.Reader, fs.FileMode) error { return f.err }
func (f failFiles) ReadDir(context.Context, string) ([]sandbox.FileInfo, error)     { return nil, f.err }
func (f failFiles) Stat(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, f.err
}
func (f failFiles) Mkdir(context.Context, string, fs.FileMode) error { return f.err }
func (f failFiles) Remove(context.Context, string) error             { return f.err }
func (f failFiles) Rename(context.Context, string, string) error     { return f.err }
func (f failFiles) Symlink(context.Context, string, string) error    { return f.err }
func (f failFiles) Resolve(context.Context, string) (string, error)  { return "", f.err }
func (f failFiles) NoFollow() sandbox.Files                          { return f }

var _ sandbox.LifetimeSetter = (*Instance)(nil)

// SetLifetime tells the agent of a sandbox that outlives its host sessions
// its lifetime (agent.LifetimeRequest): it ends the sandbox itself once
// that has run out while no host is attached. A sandbox that dies with its
// connection needs none.
func (in *Instance) SetLifetime(ctx context.Context, left, idle, idleFor time.Duration) error {
	if !in.client.Hello().Persistent {
		return nil
	}
	if err := in.usable(); err != nil {
		return err
	}
	req := agent.LifetimeRequest{IdleMS: idle.Milliseconds(), IdleForMS: idleFor.Milliseconds()}
	if left != 0 {
		req.RemainingMS = max(left.Milliseconds(), 1)
	}
	return in.client.SetLifetime(ctx, req)
}
