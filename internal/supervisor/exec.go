package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ExecRequest says what to run: Argv, or Code in a Language.
type ExecRequest struct {
	Argv []string
	// Code and Language run a program text: "python", "bash" or "sh".
	Code     string
	Language string
	Env      []string
	Dir      string
	// Stdin is the command's whole standard input.
	Stdin []byte
	// Timeout bounds the wall time; zero means the sandbox's default (for a
	// background process, or one on a terminal: none).
	Timeout time.Duration
	// OwnTimeout says Timeout is the caller's own, which the sandbox's
	// exec timeout neither fills nor bounds: zero is no limit but the
	// sandbox's lifetime (E2B's commands, whose SDKs give their own). The
	// policy's ceiling bounds it still.
	OwnTimeout bool
	// PTY runs the command on a terminal of this size (see
	// sandbox.ExecRequest.PTY): its output is one stream, which Stdout gets.
	PTY *sandbox.TermSize
	// Stdout and Stderr receive output as it comes (Exec only); nil discards.
	Stdout, Stderr io.Writer
	// Rollback, when RollbackOnFailure, restores /workspace to its state
	// before the exec when the exec fails (rollback.go).
	Rollback sandbox.RollbackMode
}

// maxCode is the longest program text: the kernel's limit on one argument.
const maxCode = 128<<10 - 1

// Command returns the argv that runs code in language.
func Command(language, code string) ([]string, error) {
	if len(code) > maxCode {
		return nil, fmt.Errorf("%w: code is %d bytes; at most %d fit in one command — write it to a file and run that", sandbox.ErrInvalid, len(code), maxCode)
	}
	switch language {
	case "python", "python3":
		return []string{"python3", "-c", code}, nil
	case "bash":
		return []string{"bash", "-c", code}, nil
	case "sh":
		return []string{"sh", "-c", code}, nil
	}
	return nil, fmt.Errorf("%w: language %q: use \"python\", \"bash\" or \"sh\"", sandbox.ErrInvalid, language)
}

// request turns r into the driver's request.
func (r ExecRequest) request() (sandbox.ExecRequest, error) {
	argv := r.Argv
	switch {
	case len(argv) > 0 && (r.Code != "" || r.Language != ""):
		return sandbox.ExecRequest{}, fmt.Errorf("%w: give either argv or code and language, not both", sandbox.ErrInvalid)
	case len(argv) == 0:
		if r.Code == "" && r.Language == "" {
			return sandbox.ExecRequest{}, fmt.Errorf("%w: no command given: set argv, or code and language", sandbox.ErrInvalid)
		}
		var err error
		if argv, err = Command(r.Language, r.Code); err != nil {
			return sandbox.ExecRequest{}, err
		}
	}
	req := sandbox.ExecRequest{Argv: argv, Env: r.Env, Dir: r.Dir, Timeout: r.Timeout, PTY: r.PTY, Stdout: r.Stdout, Stderr: r.Stderr}
	if r.Timeout < 0 {
		return req, fmt.Errorf("%w: timeout cannot be negative", sandbox.ErrInvalid)
	}
	return req, req.Validate()
}

// execTimeout is the wall-time limit of req in the sandbox
// (sandbox.ExecRequest.WallTimeout, as its driver resolves it). Asking for
// more than the sandbox's timeout is refused, as a create asking for more
// than its template is: the sandbox's timeout is what the template and
// the policy's ceiling allowed. With own (ExecRequest.OwnTimeout), the
// caller's timeout stands as it is, zero for none.
func (l *live) execTimeout(req sandbox.ExecRequest, own bool) (time.Duration, error) {
	if own {
		return req.Timeout, nil
	}
	l.mu.Lock()
	limits := l.rec.Spec.Limits.WithDefaults()
	id := l.rec.ID
	l.mu.Unlock()
	if req.Timeout > limits.Timeout {
		return 0, fmt.Errorf("%w: timeout %s is more than sandbox %s allows (%s): ask for at most that, or create a sandbox with a longer timeout", sandbox.ErrInvalid, req.Timeout, id, limits.Timeout)
	}
	return req.WallTimeout(limits), nil
}

// Exec runs a command in sandbox id to its end and returns its Result.
// Cancelling ctx kills the command.
func (s *Supervisor) Exec(ctx context.Context, c Caller, id string, r ExecRequest) (sandbox.Result, error) {
	req, err := r.request()
	if err != nil {
		return sandbox.Result{}, err
	}
	ctx, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return sandbox.Result{}, err
	}
	defer done()
	l, err := s.lookup(c, id)
	if err != nil {
		return sandbox.Result{}, err
	}
	req.Dir = l.defaultDir(req.Dir)
	l.busy.Add(1)
	l.touch(s.opts.Now())
	defer func() {
		l.touch(s.opts.Now())
		l.busy.Add(-1)
	}()
	timeout, err := l.execTimeout(req, r.OwnTimeout)
	if err != nil {
		return sandbox.Result{}, err
	}
	pr := l.request(policy.Request{Action: policy.ActionExec, Argv: req.Argv, Code: r.Code, Language: r.Language, Path: execDir(req.Dir), Limits: &sandbox.Limits{Timeout: timeout}})
	if err := s.decide(ctx, c, pr); err != nil {
		return sandbox.Result{}, err
	}
	tx, err := s.beforeExec(ctx, c, l, r.Rollback)
	if err != nil {
		return sandbox.Result{}, err
	}
	// Output is masked by the policy's redactor, then kept in the exec's
	// rings and hashed for the audit log, then passed on: the digest is of
	// what the caller gets.
	start := time.Now()
	p, err := s.startProc(ctx, c, l, procStart{req: req, pr: pr, stdin: r.Stdin, tx: tx})
	var ce *sandbox.CommandError
	switch {
	case errors.As(err, &ce):
		res := ce.Result()
		s.recordStartFailure(ctx, c, pr, res)
		s.afterExec(c, l, tx, &res, nil)
		return res, nil
	case errors.Is(err, sandbox.ErrClosed):
		s.afterExec(c, l, tx, &sandbox.Result{}, nil)
		return sandbox.Result{}, fmt.Errorf("sandbox %s ended: %w", id, ErrNotRunning)
	case err != nil:
		s.afterExec(c, l, tx, &sandbox.Result{}, nil)
		return sandbox.Result{}, err
	}
	res, err := p.waitOrKill(ctx)
	s.m.ExecSeconds.Observe(time.Since(start).Seconds())
	if errors.Is(err, sandbox.ErrClosed) {
		return res, fmt.Errorf("sandbox %s ended: %w", id, ErrNotRunning)
	}
	return res, err
}

// waitOrKill waits for p to end. When ctx ends first it kills p
// (sandbox.WaitOrKill): the result then says so within sandbox.KillWait.
func (p *proc) waitOrKill(ctx context.Context) (sandbox.Result, error) {
	return sandbox.WaitOrKill(ctx, procEnd{p})
}

// procEnd is p as a sandbox.Process whose end is the one the supervisor
// records (p.done), not the driver's.
type procEnd struct{ *proc }

func (e procEnd) ID() string { return e.id }

func (e procEnd) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-e.done:
		return e.result, e.err
	default:
	}
	select {
	case <-e.done:
		return e.result, e.err
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
}

func (e procEnd) Signal(ctx context.Context, sig syscall.Signal) error { return e.p.Signal(ctx, sig) }

// Files returns the file API of sandbox id, and a func to call when the
// caller is done with it (it marks the sandbox used).
//
// The call counts once against the key's file rate limit and holds one of
// its in-flight slots until done is called.
func (s *Supervisor) Files(ctx context.Context, c Caller, id string) (sandbox.Files, func(), error) {
	_, release, err := s.Begin(ctx, c, OpFiles)
	if err != nil {
		return nil, nil, err
	}
	l, err := s.lookup(c, id)
	if err != nil {
		release()
		return nil, nil, err
	}
	l.busy.Add(1)
	l.touch(s.opts.Now())
	return &guardedFiles{Files: l.inst.Files(), s: s, c: c, l: l}, func() {
		l.touch(s.opts.Now())
		l.busy.Add(-1)
		release()
	}, nil
}

// StartRequest starts a process that the caller does not wait for.
type StartRequest struct {
	ExecRequest
	// KeepStdinOpen leaves standard input open after Stdin for WriteStdin.
	// A terminal's input is always open.
	KeepStdinOpen bool
	// Foreground runs it as an exec runs: with the sandbox's default
	// timeout, and every process it started ends with it. Otherwise it is
	// a background process: no default timeout, no output limit (its rings
	// keep the latest output), and what it started lives on.
	Foreground bool
	// Tag is the caller's label of the process, kept in its ProcessInfo
	// (E2B's process tag). At most 256 bytes.
	Tag string
}

// ProcessInfo describes a process of a sandbox.
type ProcessInfo struct {
	ID   string
	Argv []string
	// Env and Dir are the request's (Env adds to the sandbox's
	// environment; an empty Dir is /workspace); Tag is its caller's label.
	Env     []string
	Dir     string
	Tag     string
	Started time.Time
	Running bool
	// Background says the processes it started outlive it.
	Background bool
	// PTY is the size of its terminal; nil when it runs on pipes.
	PTY *sandbox.TermSize
	// Result is set once it has ended.
	Result *sandbox.Result
	// Stdout and Stderr hold what it printed (the terminal's output is
	// Stdout): filled by Wait (the tail its buffers hold) and Output (from
	// the offsets asked for). StdoutOffset and StderrOffset are the
	// offsets of their first bytes in their streams.
	Stdout, Stderr             []byte
	StdoutOffset, StderrOffset int64
}

// maxFinished is how many ended processes a sandbox remembers.
const maxFinished = 64

// StartProcess starts a process in sandbox id and returns at once; follow
// it with Follow, and get its result with Wait. A command that cannot
// start is an error wrapping sandbox.ErrInvalid and the
// *sandbox.CommandError (whose Result is a foreground exec's result).
func (s *Supervisor) StartProcess(ctx context.Context, c Caller, id string, r StartRequest) (ProcessInfo, error) {
	r.Stdout, r.Stderr = nil, nil
	req, err := r.request()
	if err != nil {
		return ProcessInfo{}, err
	}
	if len(r.Tag) > 256 {
		return ProcessInfo{}, fmt.Errorf("%w: tag: at most 256 bytes", sandbox.ErrInvalid)
	}
	ctx, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	l, err := s.lookup(c, id)
	if err != nil {
		return ProcessInfo{}, err
	}
	req.Dir = l.defaultDir(req.Dir)
	req.Background = !r.Foreground
	timeout, err := l.execTimeout(req, r.OwnTimeout)
	if err != nil {
		return ProcessInfo{}, err
	}
	pr := l.request(policy.Request{Action: policy.ActionExec, Argv: req.Argv, Code: r.Code, Language: r.Language, Path: execDir(req.Dir), Limits: &sandbox.Limits{Timeout: timeout}})
	if err := s.decide(ctx, c, pr); err != nil {
		return ProcessInfo{}, err
	}
	l.touch(s.opts.Now())
	if r.Rollback != sandbox.RollbackNever && !r.Foreground {
		return ProcessInfo{}, fmt.Errorf("%w: rollback applies to execs (foreground), not to background processes, whose work goes on after they return", sandbox.ErrInvalid)
	}
	var tx *execTxn
	if r.Foreground {
		if tx, err = s.beforeExec(ctx, c, l, r.Rollback); err != nil {
			return ProcessInfo{}, err
		}
	}
	p, err := s.startProc(ctx, c, l, procStart{req: req, pr: pr, keepStdin: r.KeepStdinOpen, stdin: r.Stdin, tag: r.Tag, tx: tx})
	if err != nil {
		s.afterExec(c, l, tx, &sandbox.Result{}, nil)
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			if r.Foreground {
				// An exec that cannot start has a result (127, 126).
				s.recordStartFailure(ctx, c, pr, ce.Result())
			}
			return ProcessInfo{}, fmt.Errorf("%w: %w", sandbox.ErrInvalid, ce)
		}
		if errors.Is(err, sandbox.ErrClosed) {
			return ProcessInfo{}, fmt.Errorf("sandbox %s ended: %w", id, ErrNotRunning)
		}
		return ProcessInfo{}, err
	}
	return p.info(false), nil
}

// info describes p; with output, the tail of its output its buffers hold.
func (p *proc) info(output bool) ProcessInfo {
	in := ProcessInfo{ID: p.id, Argv: p.argv, Env: p.env, Dir: p.dir, Tag: p.tag, Started: p.started, Running: true, Background: p.background}
	p.mu.Lock()
	if p.pty != nil {
		sz := *p.pty
		in.PTY = &sz
	}
	p.mu.Unlock()
	select {
	case <-p.done:
		in.Running = false
		r := p.result
		if p.err != nil && r.Reason == "" {
			r = sandbox.Result{ExitCode: -1, Reason: sandbox.ReasonError, LimitsHit: []sandbox.Limit{}, Message: "airlock lost the process"}
		}
		in.Result = &r
	default:
	}
	if output {
		in.Stdout, in.StdoutOffset = p.out.Bytes()
		if p.errOut != nil {
			in.Stderr, in.StderrOffset = p.errOut.Bytes()
		}
	}
	return in
}

func (s *Supervisor) process(c Caller, id, pid string) (*live, *proc, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return nil, nil, err
	}
	l.touch(s.opts.Now())
	l.mu.Lock()
	p := l.procs[pid]
	l.mu.Unlock()
	if p == nil {
		return nil, nil, fmt.Errorf("process %q of sandbox %s: %w", pid, id, sandbox.ErrNotFound)
	}
	return l, p, nil
}

// Processes lists the processes of sandbox id, foreground and background,
// running and recently ended, oldest first.
func (s *Supervisor) Processes(ctx context.Context, c Caller, id string) ([]ProcessInfo, error) {
	l, err := s.lookup(c, id)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	ps := make([]*proc, 0, len(l.procs))
	for _, p := range l.procs {
		ps = append(ps, p)
	}
	l.mu.Unlock()
	slices.SortFunc(ps, func(a, b *proc) int { return a.started.Compare(b.started) })
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info(false))
	}
	return out, nil
}

// WriteStdin sends data to the standard input of process pid, then closes
// it when eof is set. The process must have been started with
// KeepStdinOpen or on a terminal; on a terminal the data is typed into it.
// At most maxStdinQueue bytes wait for the process to read them: a larger
// write waits for it, as long as ctx lasts and the process reads something
// at least every stall timeout; a write that stops early says how much of
// it was queued.
func (s *Supervisor) WriteStdin(ctx context.Context, c Caller, id, pid string, data []byte, eof bool) error {
	ctx, release, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return err
	}
	defer release()
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return err
	}
	if p.stdin == nil {
		return fmt.Errorf("%w: process %s was not started with keep_stdin_open (or a pty)", sandbox.ErrInvalid, pid)
	}
	n, err := p.stdin.write(ctx, data, s.stdinStall)
	switch {
	case errors.Is(err, errStdinClosed):
		return fmt.Errorf("process %s: standard input is closed: %w", pid, ErrNotRunning)
	case errors.Is(err, errStdinStalled):
		return &RateError{
			Msg: fmt.Sprintf("process %s has read nothing of its standard input for %s and %d bytes wait for it; %d of the %d bytes of this write were queued: make it read, or write less",
				pid, s.stdinStall, maxStdinQueue, n, len(data)),
			RetryAfter: time.Second,
		}
	case err != nil:
		return fmt.Errorf("write to process %s: %d of %d bytes were queued before the call ended: %w", pid, n, len(data), err)
	}
	if eof {
		p.stdin.close()
	}
	return nil
}

// Signal sends sig to process pid; SIGKILL kills its whole tree.
func (s *Supervisor) Signal(ctx context.Context, c Caller, id, pid string, sig syscall.Signal) error {
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return err
	}
	return p.p.Signal(ctx, sig)
}

// Wait waits until process pid has ended (or ctx is done) and returns it
// with the tail of its output that its buffers hold.
func (s *Supervisor) Wait(ctx context.Context, c Caller, id, pid string) (ProcessInfo, error) {
	ctx, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	return p.info(true), nil
}

// ExecResult returns exec (or process) pid of sandbox id as it is now,
// without waiting: running, or ended with its result and the tail of its
// output its buffers hold. An ended one stays readable for an hour (within
// the sandbox's bounds on ended processes), then it is not found.
func (s *Supervisor) ExecResult(ctx context.Context, c Caller, id, pid string) (ProcessInfo, error) {
	_, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	return p.info(true), nil
}

// execDir is the working directory of an exec whose Dir is dir, as the
// policy's path sees it: dir, or the home the command starts in ("."
// from the home, which live.request makes absolute).
func execDir(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}
