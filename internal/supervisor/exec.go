package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
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
	// background process: none).
	Timeout time.Duration
	// Stdout and Stderr receive output as it comes (Exec only); nil discards.
	Stdout, Stderr io.Writer
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
	req := sandbox.ExecRequest{Argv: argv, Env: r.Env, Dir: r.Dir, Timeout: r.Timeout, Stdout: r.Stdout, Stderr: r.Stderr}
	if len(r.Stdin) > 0 {
		req.Stdin = bytes.NewReader(r.Stdin)
	}
	if r.Timeout < 0 {
		return req, fmt.Errorf("%w: timeout cannot be negative", sandbox.ErrInvalid)
	}
	return req, req.Validate()
}

// execTimeout is the wall-time limit of an exec that asks for asked: the
// sandbox's own when it asks for none (a background process: none at
// all). Asking for more than the sandbox's timeout is refused, as a create
// asking for more than its template is: the sandbox's timeout is what the
// template and the policy's ceiling allowed.
func (l *live) execTimeout(asked time.Duration, background bool) (time.Duration, error) {
	l.mu.Lock()
	limit := l.rec.Spec.Limits.WithDefaults().Timeout
	id := l.rec.ID
	l.mu.Unlock()
	switch {
	case asked > limit:
		return 0, fmt.Errorf("%w: timeout %s is more than sandbox %s allows (%s): ask for at most that, or create a sandbox with a longer timeout", sandbox.ErrInvalid, asked, id, limit)
	case asked > 0:
		return asked, nil
	case background:
		return 0, nil
	}
	return limit, nil
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
	l.busy.Add(1)
	l.touch(s.opts.Now())
	defer func() {
		l.touch(s.opts.Now())
		l.busy.Add(-1)
	}()
	timeout, err := l.execTimeout(r.Timeout, false)
	if err != nil {
		return sandbox.Result{}, err
	}
	pr := l.request(policy.Request{Action: policy.ActionExec, Argv: req.Argv, Code: r.Code, Language: r.Language, Limits: &sandbox.Limits{Timeout: timeout}})
	if err := s.decide(ctx, c, pr); err != nil {
		return sandbox.Result{}, err
	}
	// Output is masked by the policy's redactor, then hashed for the audit
	// log, then passed on: the digest is of what the caller gets.
	stdout, stderr := newHashWriter(req.Stdout), newHashWriter(req.Stderr)
	red := s.policy.Redactor()
	rout, rerr := red.Writer(stdout), red.Writer(stderr)
	req.Stdout, req.Stderr = rout, rerr
	start := time.Now()
	res, err := sandbox.Run(ctx, l.inst, req)
	_, _ = rout.Flush(), rerr.Flush()
	s.m.ExecSeconds.Observe(time.Since(start).Seconds())
	s.recordExec(ctx, c, pr, res, stdout.sum(), stderr.sum(), err)
	if errors.Is(err, sandbox.ErrClosed) {
		return res, fmt.Errorf("sandbox %s ended: %w", id, ErrNotRunning)
	}
	return res, err
}

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

// proc is a background process of a sandbox.
type proc struct {
	id      string
	argv    []string
	started time.Time
	p       sandbox.Process

	stdin *stdinQueue // nil unless kept open

	stdout, stderr *capBuffer
	done           chan struct{}
	result         sandbox.Result
	err            error
}

// closeStdin drops what waits for the process's standard input: it has
// ended, or is about to.
func (p *proc) closeStdin() {
	if p.stdin != nil {
		p.stdin.discard()
	}
}

// StartRequest starts a background process.
type StartRequest struct {
	ExecRequest
	// KeepStdinOpen leaves standard input open after Stdin for WriteStdin.
	KeepStdinOpen bool
}

// ProcessInfo describes a background process.
type ProcessInfo struct {
	ID      string
	Argv    []string
	Started time.Time
	Running bool
	// Result is set once it has ended.
	Result *sandbox.Result
	// Stdout and Stderr hold what it printed (up to the sandbox's output
	// limit); only Wait fills them.
	Stdout, Stderr []byte
}

// maxFinished is how many ended processes a sandbox remembers.
const maxFinished = 64

// StartProcess starts a background process in sandbox id; its output is
// kept for Wait.
func (s *Supervisor) StartProcess(ctx context.Context, c Caller, id string, r StartRequest) (ProcessInfo, error) {
	r.Stdout, r.Stderr = nil, nil
	req, err := r.request()
	if err != nil {
		return ProcessInfo{}, err
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
	timeout, err := l.execTimeout(r.Timeout, true)
	if err != nil {
		return ProcessInfo{}, err
	}
	pr := l.request(policy.Request{Action: policy.ActionExec, Argv: req.Argv, Code: r.Code, Language: r.Language, Limits: &sandbox.Limits{Timeout: timeout}})
	if err := s.decide(ctx, c, pr); err != nil {
		return ProcessInfo{}, err
	}
	l.touch(s.opts.Now())
	l.mu.Lock()
	limit := l.rec.Spec.Limits.WithDefaults().OutputBytes
	l.mu.Unlock()
	p := &proc{argv: req.Argv, started: time.Now().UTC(), stdout: &capBuffer{max: limit}, stderr: &capBuffer{max: limit}, done: make(chan struct{})}
	rout, rerr := s.policy.Redactor().Writer(p.stdout), s.policy.Redactor().Writer(p.stderr)
	req.Stdout, req.Stderr, req.Background = rout, rerr, true
	if r.KeepStdinOpen {
		p.stdin = newStdinQueue(r.Stdin)
		req.Stdin = p.stdin
	}
	sp, err := l.inst.Start(ctx, req)
	if err != nil {
		p.closeStdin()
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return ProcessInfo{}, fmt.Errorf("%w: %s", sandbox.ErrInvalid, ce.Msg)
		}
		if errors.Is(err, sandbox.ErrClosed) {
			return ProcessInfo{}, fmt.Errorf("sandbox %s ended: %w", id, ErrNotRunning)
		}
		return ProcessInfo{}, err
	}
	p.id, p.p = sp.ID(), sp
	l.mu.Lock()
	l.procs[p.id] = p
	l.mu.Unlock()
	go func() {
		res, err := sp.Wait(context.Background())
		_, _ = rout.Flush(), rerr.Flush()
		p.closeStdin()
		p.result, p.err = res, err
		s.recordExec(context.Background(), c, pr, res, audit.Digest(p.stdout.Bytes()), audit.Digest(p.stderr.Bytes()), err)
		close(p.done)
		l.mu.Lock()
		l.finished = append(l.finished, p.id)
		if len(l.finished) > maxFinished {
			delete(l.procs, l.finished[0])
			l.finished = l.finished[1:]
		}
		l.mu.Unlock()
	}()
	return p.info(false), nil
}

func (p *proc) info(output bool) ProcessInfo {
	in := ProcessInfo{ID: p.id, Argv: p.argv, Started: p.started, Running: true}
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
		in.Stdout, in.Stderr = p.stdout.Bytes(), p.stderr.Bytes()
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

// Processes lists the background processes of sandbox id, running and
// recently ended, oldest first.
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
// KeepStdinOpen. At most maxStdinQueue bytes wait for the process to read
// them: a larger write waits for it, as long as ctx lasts and the process
// reads something at least every stall timeout; a write that stops early
// says how much of it was queued.
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
		return fmt.Errorf("%w: process %s was not started with keep_stdin_open", sandbox.ErrInvalid, pid)
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
// with its output.
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

// capBuffer keeps the first max bytes written to it.
type capBuffer struct {
	mu  sync.Mutex
	max int64
	buf []byte
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - int64(len(b.buf)); room > 0 {
		b.buf = append(b.buf, p[:min(int64(len(p)), room)]...)
	}
	return len(p), nil
}

func (b *capBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf)
}
