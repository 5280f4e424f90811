package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/ring"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Every command a sandbox runs, foreground exec or background process, is
// a proc: it has the exec's id, and keeps its recent output in a ring per
// stream (stdout and stderr, or the terminal's one stream), with offsets,
// that any caller with access to the sandbox may follow (Follow) while it
// runs and read (Output, Wait) once it has ended.

// DefaultOutputBuffer is how much of each output stream of every process
// a sandbox keeps, unless its template says (Template.OutputBuffer).
const DefaultOutputBuffer = 1 << 20

// Bounds of Template.OutputBuffer.
const (
	minOutputBuffer = 4 << 10
	maxOutputBuffer = 256 << 20
)

// Stream names of output events.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamPTY is the one stream of a process on a terminal.
	StreamPTY = "pty"
)

// maxFinishedOutput bounds the output the ended processes of one sandbox
// keep; past it the oldest are forgotten, as past maxFinished.
const maxFinishedOutput = 16 << 20

// proc is a process of a sandbox.
type proc struct {
	id         string
	argv       []string
	env        []string // as the request gave it, added to the sandbox's
	dir        string
	tag        string
	started    time.Time
	background bool
	p          sandbox.Process

	stdin *stdinQueue // nil unless kept open (always on a terminal)

	// out is stdout, or the terminal's stream; errOut is stderr, nil on a
	// terminal.
	out, errOut *ring.Buffer

	mu  sync.Mutex
	pty *sandbox.TermSize // the terminal's size now; nil for pipes

	done   chan struct{}
	result sandbox.Result
	err    error
	ended  time.Time
}

// closeStdin drops what waits for the process's standard input: it has
// ended, or is about to.
func (p *proc) closeStdin() {
	if p.stdin != nil {
		p.stdin.discard()
	}
}

// streams returns the proc's rings with their stream names.
func (p *proc) streams() ([]*ring.Buffer, []string) {
	if p.errOut == nil {
		return []*ring.Buffer{p.out}, []string{StreamPTY}
	}
	return []*ring.Buffer{p.out, p.errOut}, []string{StreamStdout, StreamStderr}
}

// kept is how many bytes of output p holds.
func (p *proc) kept() int64 {
	var n int64
	rs, _ := p.streams()
	for _, r := range rs {
		start, end, _ := r.Bounds()
		n += end - start
	}
	return n
}

// procStart is what startProc needs besides the sandbox.
type procStart struct {
	// req is the driver's request; its Stdout and Stderr, when set, get the
	// output too, as it comes (a foreground exec's caller).
	req sandbox.ExecRequest
	pr  policy.Request
	// keepStdin leaves standard input open after stdin for WriteStdin. A
	// terminal's input is always open.
	keepStdin bool
	stdin     []byte
	// tag is the caller's label of the process (StartRequest.Tag).
	tag string
	// tx, when set, is the exec's transaction: its rollback runs before
	// its result is published.
	tx *execTxn
}

// outputBuffer is the size of each output ring of l's processes.
func (s *Supervisor) outputBuffer(l *live) int {
	l.mu.Lock()
	name := l.rec.Template
	l.mu.Unlock()
	if t, ok := s.templates[name]; ok && t.OutputBuffer > 0 {
		return int(t.OutputBuffer)
	}
	return DefaultOutputBuffer
}

// startProc starts ps.req in l and tracks it until it has ended: its
// output goes through the policy's redactor into its rings (and to the
// request's own writers), and its end is recorded in the audit log.
func (s *Supervisor) startProc(ctx context.Context, c Caller, l *live, ps procStart) (*proc, error) {
	req := ps.req
	l.mu.Lock()
	drv := l.rec.Driver
	l.mu.Unlock()
	if d, ok := s.opts.Drivers[drv]; ok {
		if err := d.Capabilities().CheckExec(drv, req); err != nil {
			return nil, err
		}
	}
	size := s.outputBuffer(l)
	p := &proc{argv: req.Argv, env: req.Env, dir: req.Dir, tag: ps.tag, started: time.Now().UTC(), background: req.Background, out: ring.New(size), done: make(chan struct{})}
	if req.PTY != nil {
		sz := *req.PTY
		p.pty = &sz
	} else {
		p.errOut = ring.New(size)
	}
	w := s.procWriters(p, req.Stdout, req.Stderr)
	req.Stdout, req.Stderr = w.out, nil
	if w.err != nil {
		req.Stderr = w.err
	}
	req.Stdin = nil
	if ps.keepStdin || req.PTY != nil {
		p.stdin = newStdinQueue(ps.stdin)
		req.Stdin = p.stdin
	} else if len(ps.stdin) > 0 {
		req.Stdin = bytes.NewReader(ps.stdin)
	}
	// The sandbox keeps as much of the output as this daemon does, for
	// the next daemon after a restart.
	req.OutputBuffer = int64(size)
	sp, err := l.inst.Start(ctx, req)
	if err != nil {
		p.closeStdin()
		return nil, err
	}
	p.id, p.p = sp.ID(), sp
	s.recordTxn(l, ps.tx, p.id)
	l.mu.Lock()
	l.procs[p.id] = p
	l.mu.Unlock()
	go s.track(l, c, ps.pr, p, sp, w, ps.tx) //nolint:gosec // the process outlives the request that started it
	return p, nil
}

// procOutput is where a process's output goes: through the policy's
// redactor into its rings, hashed for the audit log, and on to the
// caller's writers.
type procOutput struct {
	out, err   flushWriter // err is nil on a terminal
	hout, herr *hashWriter
}

type flushWriter interface {
	io.Writer
	Flush() error
}

// procWriters makes p's output writers, passing output on to stdout and
// stderr when they are set.
func (s *Supervisor) procWriters(p *proc, stdout, stderr io.Writer) procOutput {
	w := procOutput{hout: newHashWriter(stdout), herr: newHashWriter(stderr)}
	red := s.policy.Redactor()
	w.out = red.Writer(tee{p.out, w.hout})
	if p.errOut != nil {
		w.err = red.Writer(tee{p.errOut, w.herr})
	}
	return w
}

// track waits for sp, p's process in l, to end, settles p and records its
// end in the audit log. A process whose sandbox this daemon let go of
// (sandbox.ErrDetached) has not ended: nothing is recorded.
func (s *Supervisor) track(l *live, c Caller, pr policy.Request, p *proc, sp sandbox.Process, w procOutput, tx *execTxn) {
	res, err := sp.Wait(context.Background())
	_ = w.out.Flush()
	if w.err != nil {
		_ = w.err.Flush()
	}
	p.closeStdin()
	s.afterExec(c, l, tx, &res, err)
	p.result, p.err, p.ended = res, err, time.Now()
	p.out.Close()
	if p.errOut != nil {
		p.errOut.Close()
	}
	if errors.Is(err, sandbox.ErrDetached) {
		close(p.done)
		return
	}
	s.recordExec(context.Background(), c, pr, res, w.hout.sum(), w.herr.sum(), err)
	close(p.done)
	l.finish(p)
}

// finish puts p among l's ended processes, and forgets the oldest ones past
// maxFinished or past maxFinishedOutput bytes of output.
func (l *live) finish(p *proc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished = append(l.finished, p.id)
	l.finishedBytes += p.kept()
	for len(l.finished) > 1 && (len(l.finished) > maxFinished || l.finishedBytes > maxFinishedOutput) {
		if old := l.procs[l.finished[0]]; old != nil {
			l.finishedBytes -= old.kept()
			delete(l.procs, l.finished[0])
		}
		l.finished = l.finished[1:]
	}
}

// tee writes to the ring, then to w; a slow w slows only the caller that
// gave it, and the ring never waits.
type tee struct {
	r *ring.Buffer
	w io.Writer
}

func (t tee) Write(p []byte) (int, error) {
	_, _ = t.r.Write(p)
	return t.w.Write(p)
}

// OutputEvent is a piece of a followed process's output.
type OutputEvent struct {
	// Stream is StreamStdout, StreamStderr or StreamPTY.
	Stream string
	// Offset is the offset of Data's first byte in its stream.
	Offset int64
	Data   []byte
	// Missed, when not zero, says that many bytes before Offset were
	// dropped from the buffer before this follower read them.
	Missed int64
}

// Offsets say where in each output stream a follower starts.
type Offsets struct {
	// Stdout is the offset in stdout, or in the terminal's stream.
	Stdout int64
	Stderr int64
	// Now starts at the end of what was printed so far; the offsets are
	// then ignored.
	Now bool
}

// Follow calls fn with process pid's output from the given offsets on, as
// it is printed, until the process has ended and fn has had all of it;
// then it returns the process, its Result set. Output the buffer no longer
// holds is skipped, and the next event says how many bytes were missed:
// a follower that reads slowly never slows the process or other followers.
// Ending ctx stops the following, not the process. start, when set, is
// called with the process before any output.
func (s *Supervisor) Follow(ctx context.Context, c Caller, id, pid string, from Offsets, start func(ProcessInfo) error, fn func(OutputEvent) error) (ProcessInfo, error) {
	if from.Stdout < 0 || from.Stderr < 0 {
		return ProcessInfo{}, fmt.Errorf("%w: offsets cannot be negative", sandbox.ErrInvalid)
	}
	// A follower holds one of the key's in-flight slots as long as it
	// follows, as a wait does.
	ctx, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	l, p, err := s.process(c, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	l.busy.Add(1)
	defer func() {
		l.touch(s.opts.Now())
		l.busy.Add(-1)
	}()
	rings, names := p.streams()
	offs := []int64{from.Stdout, from.Stderr}[:len(rings)]
	if from.Now {
		for i, r := range rings {
			_, offs[i], _ = r.Bounds()
		}
	}
	if start != nil {
		if err := start(p.info(false)); err != nil {
			return ProcessInfo{}, err
		}
	}
	buf := make([]byte, 32<<10)
	for {
		changed := make([]<-chan struct{}, len(rings))
		progressed, ended := false, true
		for i, r := range rings {
			// Changed is taken before the read: a write in between wakes
			// the wait below.
			changed[i] = r.Changed()
			n, at := r.ReadAt(buf, offs[i])
			if n > 0 {
				ev := OutputEvent{Stream: names[i], Offset: at, Data: append([]byte(nil), buf[:n]...), Missed: at - offs[i]}
				if err := fn(ev); err != nil {
					return ProcessInfo{}, err
				}
				offs[i] = at + int64(n)
				progressed = true
			}
			if _, end, closed := r.Bounds(); !closed || offs[i] < end {
				ended = false
			}
		}
		if progressed {
			continue
		}
		if ended {
			<-p.done // the rings close just before
			return p.info(false), nil
		}
		// One ring, or two: wait for either.
		select {
		case <-changed[0]:
		case <-changed[len(changed)-1]:
		case <-ctx.Done():
			return ProcessInfo{}, ctx.Err()
		}
	}
}

// Output returns process pid with what it printed from the given offsets
// on, as much as its buffers hold, without waiting: Stdout and Stderr,
// starting at StdoutOffset and StderrOffset (later than asked when the
// buffer no longer holds what was asked for).
func (s *Supervisor) Output(ctx context.Context, c Caller, id, pid string, from Offsets) (ProcessInfo, error) {
	if from.Stdout < 0 || from.Stderr < 0 {
		return ProcessInfo{}, fmt.Errorf("%w: offsets cannot be negative", sandbox.ErrInvalid)
	}
	_, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	in := p.info(false)
	read := func(r *ring.Buffer, off int64) ([]byte, int64) {
		start, end, _ := r.Bounds()
		if from.Now {
			return nil, end
		}
		b := make([]byte, max(0, end-max(off, start)))
		n, at := r.ReadAt(b, off)
		return b[:n], at
	}
	in.Stdout, in.StdoutOffset = read(p.out, from.Stdout)
	if p.errOut != nil {
		in.Stderr, in.StderrOffset = read(p.errOut, from.Stderr)
	}
	return in, nil
}

// Resize sets the size of process pid's terminal.
func (s *Supervisor) Resize(ctx context.Context, c Caller, id, pid string, size sandbox.TermSize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	ctx, done, err := s.Begin(ctx, c, OpExec)
	if err != nil {
		return err
	}
	defer done()
	_, p, err := s.process(c, id, pid)
	if err != nil {
		return err
	}
	rz, ok := p.p.(sandbox.Resizer)
	if p.errOut != nil || !ok {
		return fmt.Errorf("%w: process %s has no terminal: start it with a pty to resize it", sandbox.ErrInvalid, pid)
	}
	select {
	case <-p.done:
		return fmt.Errorf("process %s has ended: %w", pid, ErrNotRunning)
	default:
	}
	if err := rz.Resize(ctx, size); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return fmt.Errorf("process %s has ended: %w", pid, ErrNotRunning)
		}
		return err
	}
	p.mu.Lock()
	p.pty = &size
	p.mu.Unlock()
	return nil
}

// recordStartFailure records an exec that could not start (not found, not
// executable) as the result it is.
func (s *Supervisor) recordStartFailure(ctx context.Context, c Caller, pr policy.Request, res sandbox.Result) {
	empty := audit.Digest(nil)
	s.recordExec(ctx, c, pr, res, empty, empty, nil)
}
