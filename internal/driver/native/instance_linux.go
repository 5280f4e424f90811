package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// instance is one native sandbox.
type instance struct {
	d        *Driver
	spec     sandbox.Spec
	layers   []sandbox.Layer
	cmd      *exec.Cmd
	client   *agent.Client
	agentLog agentdriver.LogBuffer
	done     chan struct{}
	created  time.Time
	lifetime *time.Timer

	lock, slot *os.File
	base       int

	egress     *egress.Sandbox    // network mode egress; nil otherwise
	egressStop context.CancelFunc // ends the egress tunnels

	group, agentGroup, workload *cgroup.Group

	execSeq   atomic.Int64
	mu        sync.Mutex
	procs     map[string]*process
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

var _ sandbox.Instance = (*instance)(nil)

func (in *instance) ID() string              { return in.spec.ID }
func (in *instance) Layers() []sandbox.Layer { return append([]sandbox.Layer(nil), in.layers...) }
func (in *instance) Done() <-chan struct{}   { return in.done }
func (in *instance) Files() sandbox.Files    { return in.client }

// Exec runs req to its end.
func (in *instance) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.Result, error) {
	p, err := in.Start(ctx, req)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return sandbox.Result{ExitCode: ce.Code, Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{}, Message: ce.Msg}, nil
		}
		return sandbox.Result{}, err
	}
	pr := p.(*process)
	select {
	case <-pr.done:
		return pr.result, pr.err
	case <-ctx.Done():
	}
	kctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.Signal(kctx, syscall.SIGKILL)
	select {
	case <-pr.done:
		return pr.result, pr.err
	case <-kctx.Done():
		// The host killed the exec's cgroup itself; an agent that still
		// does not answer is not waited for.
		return sandbox.Result{ExitCode: -1, Signal: "SIGKILL", Reason: sandbox.ReasonKilled, LimitsHit: []sandbox.Limit{},
			Message: "the command was killed; the sandbox did not confirm it"}, fmt.Errorf("exec %s: %w", pr.id, ctx.Err())
	}
}

// Start starts req and returns at once.
func (in *instance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	id := "e" + strconv.FormatInt(in.execSeq.Add(1), 10)
	l := in.spec.Limits
	timeout := req.Timeout
	if timeout == 0 && !req.Background {
		timeout = l.Timeout
	}
	cpu := req.CPUTime
	if cpu == 0 {
		cpu = l.CPUTime
	}
	p := &process{
		in: in, id: id, req: req, timeout: timeout, cpuTime: cpu,
		done: make(chan struct{}),
	}
	if in.workload != nil {
		p.pidsBefore = in.workload.PidsMax()
	}
	// The stream lives as long as the exec, not as long as ctx.
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	stop := context.AfterFunc(ctx, cancel)
	ex, err := in.client.StartExec(sctx, &agent.ExecStart{
		ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir,
		TimeoutMS: timeout.Milliseconds(), CPUTimeMS: cpu.Milliseconds(),
		Background: req.Background, Stdin: req.Stdin != nil, OutputLimit: l.OutputBytes,
	})
	stop()
	if err != nil {
		cancel()
		in.removeExecGroup(p)
		return nil, err
	}
	p.ex, p.started = ex, time.Now()
	if in.workload != nil {
		// The name comes from the agent: only a plain name below this
		// sandbox's own workload group is accepted.
		if !sandbox.ValidID(ex.Cgroup) {
			ex.Close()
			cancel()
			return nil, fmt.Errorf("exec %s: the agent named no valid cgroup", id)
		}
		p.group = in.workload.Child(ex.Cgroup)
	}
	in.mu.Lock()
	in.procs[id] = p
	in.mu.Unlock()
	if req.Stdin != nil {
		go ex.FeedStdin(req.Stdin)
	}
	go p.run()
	return p, nil
}

// agentPid is the agent's pid on the host. A thread of the agent passes
// through each exec group, so kills of an exec group spare it.
func (in *instance) agentPid() int { return in.cmd.Process.Pid }

func (in *instance) removeExecGroup(p *process) {
	if p.group != nil && p.group.Exists() {
		if procs, _ := p.group.Procs(); len(procs) == 0 {
			_ = p.group.Remove()
		}
	}
}

// Close kills everything in the sandbox and removes what it made on the
// host. It runs once; later calls return the first result.
func (in *instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		in.mu.Lock()
		in.closed = true
		in.mu.Unlock()
		if in.lifetime != nil {
			in.lifetime.Stop()
		}
		in.stopEgress()
		if in.client != nil {
			in.client.Close()
		}
		in.stopAgent()
		in.removeCgroups()
		if in.group != nil && in.group.Exists() {
			in.closeErr = fmt.Errorf("sandbox %s: cgroups remain after close", in.spec.ID)
		}
		in.slot.Close()
		os.Remove(in.lock.Name())
		in.lock.Close()
	})
	return in.closeErr
}

// process is one exec on the host's side.
type process struct {
	in         *instance
	id         string
	req        sandbox.ExecRequest
	timeout    time.Duration
	cpuTime    time.Duration
	ex         *agent.Exec
	group      *cgroup.Group
	pidsBefore int64
	started    time.Time
	cancel     context.CancelFunc
	killedBy   atomic.Value // sandbox.Reason the host killed it for

	done   chan struct{}
	result sandbox.Result
	err    error
}

var _ sandbox.Process = (*process)(nil)

func (p *process) ID() string { return p.id }

// Wait returns the exec's result once it has ended.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.result, p.err
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
}

// Signal sends sig to the exec; SIGKILL kills its whole tree.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		p.killedBy.CompareAndSwap(nil, sandbox.ReasonKilled)
	}
	err := p.in.client.Signal(ctx, p.id, int(sig))
	if sig == syscall.SIGKILL && p.group != nil {
		// The host's own kill does not depend on the agent.
		_ = p.group.Kill(5*time.Second, p.in.agentPid())
	}
	return err
}

// run reads the exec's events to the end, holding the agent to the limits
// with the host's own clock and counters, and settles the result.
func (p *process) run() {
	defer close(p.done)
	defer p.cancel()
	in := p.in
	l := in.spec.Limits
	if p.timeout > 0 {
		// A backstop: the agent enforces the timeout; if it does not, the
		// host kills the exec's cgroup itself.
		t := time.AfterFunc(p.timeout+2*time.Second, func() { p.hostKill(sandbox.ReasonTimeout) })
		defer t.Stop()
	}
	var outN, errN int64
	for {
		ev, err := p.ex.Next()
		if err != nil {
			p.hostKill(sandbox.ReasonError)
			p.result = sandbox.Result{ExitCode: -1, Reason: sandbox.ReasonError, LimitsHit: []sandbox.Limit{}}
			select {
			case <-in.done:
				p.result.Reason = sandbox.ReasonKilled
				p.result.Message = "the sandbox ended while the command ran"
			default:
				p.err = fmt.Errorf("exec %s: %w", p.id, err)
				p.result.Message = "airlock lost the command: " + err.Error()
			}
			p.finish()
			return
		}
		switch {
		case ev.Exit != nil:
			outCut, errCut := p.result.StdoutTruncated, p.result.StderrTruncated
			p.result = *ev.Exit
			p.result.StdoutTruncated = p.result.StdoutTruncated || outCut
			p.result.StderrTruncated = p.result.StderrTruncated || errCut
			p.finish()
			return
		case len(ev.Stdout) > 0:
			p.write(p.req.Stdout, ev.Stdout, &outN, l.OutputBytes, &p.result.StdoutTruncated)
		case len(ev.Stderr) > 0:
			p.write(p.req.Stderr, ev.Stderr, &errN, l.OutputBytes, &p.result.StderrTruncated)
		}
	}
}

// write passes output on, and holds the agent to the output limit.
func (p *process) write(w io.Writer, data []byte, n *int64, limit int64, truncated *bool) {
	if left := limit - *n; int64(len(data)) > left {
		data = data[:max(left, 0)]
		if !*truncated {
			*truncated = true
			go p.hostKill(sandbox.ReasonOutputLimit)
		}
	}
	*n += int64(len(data))
	if w != nil && len(data) > 0 {
		_, _ = w.Write(data)
	}
}

// hostKill kills the exec's cgroup from the host.
func (p *process) hostKill(reason sandbox.Reason) {
	p.killedBy.CompareAndSwap(nil, reason)
	if p.group != nil {
		_ = p.group.Kill(5*time.Second, p.in.agentPid())
	} else {
		_ = p.in.client.Signal(context.Background(), p.id, int(syscall.SIGKILL))
	}
}

// finish replaces what the agent said about usage and limits with the
// host's own counters, writes the message, and removes the exec's cgroup.
func (p *process) finish() {
	r := &p.result
	in := p.in
	if r.Usage.WallMS == 0 {
		r.Usage.WallMS = time.Since(p.started).Milliseconds()
	}
	var oom, pids bool
	if p.group != nil {
		// A counter that cannot be read reads as zero; the others still count.
		st, err := p.group.Stats()
		if err != nil {
			in.d.opts.Logger.Warn("read exec cgroup counters", "sandbox_id", in.spec.ID, "exec_id", p.id, "err", err)
		}
		r.Usage.CPUMS = st.CPUNanos / 1e6
		r.Usage.MemoryPeakBytes = st.MemoryPeak
		oom = st.OOMKills > 0
		// v1 counts a failed fork in the forking group, v2 in the group
		// whose limit was hit: look at both.
		pids = st.PidsMax > 0
		if in.workload.PidsMax() > p.pidsBefore {
			pids = true
		}
		// The agent has ended a foreground command's tree already; the
		// host's own check and the removal of the group need not delay
		// the result.
		go func() {
			if !p.req.Background {
				_ = p.group.Kill(5*time.Second, in.agentPid())
			}
			in.removeExecGroup(p)
		}()
	}
	killedBy := r.Reason
	if hk, ok := p.killedBy.Load().(sandbox.Reason); ok && hk != sandbox.ReasonError && (killedBy == sandbox.ReasonExit || killedBy == "") {
		killedBy = hk
	}
	if killedBy == sandbox.ReasonExit {
		killedBy = ""
	}
	if r.Reason != sandbox.ReasonError {
		r.Reason = ""
		r.Classify(killedBy, sandbox.Evidence{OOM: oom, Pids: pids})
	}
	if r.Message == "" {
		r.Message = sandbox.Message(r, in.spec.Limits, p.timeout, p.cpuTime)
	}
	in.mu.Lock()
	delete(in.procs, p.id)
	in.mu.Unlock()
}
