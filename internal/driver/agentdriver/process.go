package agentdriver

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// process is one exec on the host's side.
type process struct {
	in         *Instance
	id         string
	background bool
	pty        bool
	timeout    time.Duration
	cpuTime    time.Duration
	// outputLimit caps each output stream; 0: none (a background exec).
	outputLimit int64
	ex          *agent.Exec
	eh          ExecHost
	started     time.Time
	cancel      context.CancelFunc
	killedBy    atomic.Value // sandbox.Reason the host killed it for

	done   chan struct{}
	result sandbox.Result
	err    error
}

var (
	_ sandbox.Process = (*process)(nil)
	_ sandbox.Resizer = (*process)(nil)
)

// ID is the exec's id within its sandbox.
func (p *process) ID() string { return p.id }

// Wait returns the exec's result once it has ended.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	return sandbox.WaitDone(ctx, p.done, func() (sandbox.Result, error) { return p.result, p.err })
}

// Signal sends sig to the exec. SIGKILL kills its whole tree: from the
// host where it can, which needs no answer from the agent; through the
// agent otherwise.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		p.killedBy.CompareAndSwap(nil, sandbox.ReasonKilled)
		if p.eh.Kill() == nil {
			return nil
		}
	}
	return p.in.client.Signal(ctx, p.id, int(sig))
}

// Resize sets the size of the exec's terminal.
func (p *process) Resize(ctx context.Context, size sandbox.TermSize) error {
	if !p.pty {
		return fmt.Errorf("exec %s has no terminal: start it with a PTY: %w", p.id, sandbox.ErrInvalid)
	}
	if err := size.Validate(); err != nil {
		return err
	}
	select {
	case <-p.done:
		return fmt.Errorf("exec %s has ended: %w", p.id, sandbox.ErrNotFound)
	default:
	}
	// A send waits only for the agent's flow control; ctx bounds it.
	errc := make(chan error, 1)
	go func() { errc <- p.ex.Resize(size) }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("resize exec %s: %w", p.id, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run reads the exec's events to the end, holding the agent to the limits
// with the host's own clock and counters, and settles the result; output
// goes to stdout and stderr.
func (p *process) run(stdout, stderr io.Writer) {
	defer close(p.done)
	defer p.cancel()
	// The input half stays open on a terminal (and while stdin is fed):
	// close it, which also ends a feed still waiting on the agent.
	defer p.ex.Close()
	if p.timeout > 0 {
		// A backstop: the agent enforces the timeout; if it does not, the
		// host kills the exec itself.
		t := time.AfterFunc(time.Until(p.started.Add(p.timeout+2*time.Second)), func() { p.hostKill(sandbox.ReasonTimeout) })
		defer t.Stop()
	}
	// An attached exec's output begins where the agent's buffer of it
	// does: what it printed before counts against the limit too.
	outN, errN := p.ex.StdoutOffset, p.ex.StderrOffset
	for {
		ev, err := p.ex.Next()
		if err != nil {
			if p.in.detached.Load() {
				// This airlock let go of the sandbox: the exec runs on,
				// and its end is for whoever reattaches.
				p.err = fmt.Errorf("exec %s: %w", p.id, sandbox.ErrDetached)
				p.in.forget(p.id)
				return
			}
			p.lost(err)
			return
		}
		switch {
		case ev.Exit != nil:
			outCut, errCut := p.result.StdoutTruncated, p.result.StderrTruncated
			p.result = *ev.Exit
			p.result.StdoutTruncated = p.result.StdoutTruncated || outCut
			p.result.StderrTruncated = p.result.StderrTruncated || errCut
			p.finish()
			// The host has the result now: the agent need not keep it.
			if !p.ex.Forget() {
				go p.in.forgetExec(p.id)
			}
			return
		case len(ev.Stdout) > 0:
			p.write(stdout, ev.Stdout, &outN, p.outputLimit, &p.result.StdoutTruncated)
		case len(ev.Stderr) > 0:
			p.write(stderr, ev.Stderr, &errN, p.outputLimit, &p.result.StderrTruncated)
		}
	}
}

// write passes output on, and holds the agent to the output limit (none
// when limit is 0).
func (p *process) write(w io.Writer, data []byte, n *int64, limit int64, truncated *bool) {
	if left := limit - *n; limit > 0 && int64(len(data)) > left {
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

// hostKill kills the exec for reason: from the host where it can, else
// through the agent, within a bound.
func (p *process) hostKill(reason sandbox.Reason) {
	p.killedBy.CompareAndSwap(nil, reason)
	if p.eh.Kill() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.in.client.Signal(ctx, p.id, int(syscall.SIGKILL))
}

// finish checks what the agent said against the host's own counters,
// classifies the result and writes its message.
func (p *process) finish() {
	r := &p.result
	if r.Usage.WallMS == 0 {
		r.Usage.WallMS = time.Since(p.started).Milliseconds()
	}
	// The agent's evidence stands; the host adds what it saw itself.
	ev := p.eh.Finish(r, p.background)
	ev.OOM = ev.OOM || r.Hit(sandbox.LimitMemory)
	ev.Pids = ev.Pids || r.Hit(sandbox.LimitPids)
	// Why it ended: what the agent says, unless it says the command simply
	// exited (or nothing) while the host killed it.
	killedBy := r.Reason
	if hk, ok := p.killedBy.Load().(sandbox.Reason); ok && hk != sandbox.ReasonError && (killedBy == sandbox.ReasonExit || killedBy == "") {
		killedBy = hk
	}
	if killedBy == sandbox.ReasonExit {
		killedBy = ""
	}
	if r.Reason != sandbox.ReasonError {
		r.Reason = ""
		r.Classify(killedBy, ev)
	}
	if r.Message == "" {
		r.Message = sandbox.Message(r, p.in.spec.Limits, p.timeout, p.cpuTime)
	}
	p.in.forget(p.id)
}

// lost settles an exec whose stream broke: when the sandbox ended, the
// result says why (an out-of-memory kill of the whole runtime, say);
// otherwise airlock lost the command, and kills it from the host where it
// can.
func (p *process) lost(err error) {
	in := p.in
	r := &p.result
	r.ExitCode, r.LimitsHit = -1, []sandbox.Limit{}
	r.Usage.WallMS = time.Since(p.started).Milliseconds()
	_ = p.eh.Kill()
	if in.waitDone(3 * time.Second) {
		in.mu.Lock()
		closed := in.closed
		in.mu.Unlock()
		var dt *Death
		if !closed {
			dt = in.host.Ended()
		}
		r.Signal = "SIGKILL"
		switch {
		case dt != nil && dt.Reason == sandbox.ReasonOOM:
			r.Reason, r.LimitsHit = sandbox.ReasonOOM, []sandbox.Limit{sandbox.LimitMemory}
			r.Message = fmt.Sprintf("memory limit of %s exceeded; this ended the whole sandbox, and every process in it — use less memory (e.g. process the data in chunks) or raise --memory, and start a new sandbox", sandbox.FormatBytes(in.spec.Limits.MemoryBytes))
		case dt != nil && dt.Reason == sandbox.ReasonPids:
			r.Reason, r.LimitsHit = sandbox.ReasonPids, []sandbox.Limit{sandbox.LimitPids}
			r.Message = "the sandbox ended: " + dt.Msg + " — start fewer processes, or raise --pids"
		case dt != nil:
			r.Reason = sandbox.ReasonError
			r.Message = "the sandbox ended while the command ran: " + dt.Msg
		case closed:
			r.Reason = sandbox.ReasonKilled
			r.Message = "the sandbox was closed while the command ran"
		default:
			r.Reason = sandbox.ReasonKilled
			r.Message = "the sandbox ended while the command ran"
		}
	} else {
		p.err = fmt.Errorf("exec %s: %w", p.id, err)
		r.Reason = sandbox.ReasonError
		r.Message = "airlock lost the command: " + err.Error()
	}
	in.forget(p.id)
}
