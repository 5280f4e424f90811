package wasm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// process is one exec: one instance of a module, run on a goroutine locked
// to its own thread, so that the thread's CPU clock is the exec's CPU time.
// A warm process (warm_linux.go) is a python3 started before its exec is
// known: bind gives it its exec, and its clocks, limits and streams count
// from then.
type process struct {
	in      *instance
	id      string
	req     sandbox.ExecRequest
	mod     *module
	dir     string
	seed    [32]byte
	timeout time.Duration
	cpuTime time.Duration

	ctx    context.Context // the module's; cancelling it stops the module
	cancel context.CancelFunc
	stdin  *io.PipeReader

	// warm is set for a python3 started ahead of its exec; its standard
	// input is stdinW, which bind writes the exec's request to.
	warm   bool
	stdinW *io.PipeWriter
	// waiting is closed when a warm python3 first reads its standard
	// input: its start-up is over. An exec that takes one before then
	// waits for it, and the rest of its start-up counts as the exec's CPU.
	waiting chan struct{}
	// tid is the thread the module runs on, set before ready is closed.
	tid   atomic.Int32
	ready chan struct{}
	// bound is closed when the process has its exec; begin is then the
	// exec's start and cpu0 its thread's CPU time at that moment.
	bound  chan struct{}
	begin  time.Time
	cpu0   atomic.Int64
	stdout lateWriter
	stderr lateWriter

	mu       sync.Mutex
	killedBy sandbox.Reason // the host's reason; "" for a signal of the caller's own
	signal   string         // the signal that ended it, if one did
	killed   bool

	diskFull atomic.Bool
	done     chan struct{}
	result   sandbox.Result
	err      error
}

var _ sandbox.Process = (*process)(nil)

// execState is what airlock's host functions know of the exec calling them.
type execState struct {
	clocks clocks
}

// newProcess makes the process of one module; bind gives it its exec.
func newProcess(in *instance, mod *module, seed [32]byte) *process {
	p := &process{in: in, mod: mod, seed: seed, ready: make(chan struct{}), bound: make(chan struct{}), done: make(chan struct{})}
	ctx := context.WithValue(context.Background(), stateKey{}, &execState{clocks: in.clocks})
	p.ctx, p.cancel = context.WithCancel(ctx)
	return p
}

// bind gives p its exec: the request, its id and working directory; its
// limits, clocks and output count from now. A cold process is bound
// before it runs; a warm one when an exec takes it.
func (p *process) bind(id string, req sandbox.ExecRequest, dir string) {
	p.id, p.req, p.dir = id, req, dir
	l := p.in.spec.Limits
	p.timeout, p.cpuTime = req.WallTimeout(l), req.CPUTime
	if p.cpuTime == 0 {
		p.cpuTime = l.CPUTime
	}
	p.result.LimitsHit = []sandbox.Limit{}
	p.stdout.bind(&limitWriter{w: req.Stdout, limit: l.OutputBytes, truncated: &p.result.StdoutTruncated, kill: p.kill})
	p.stderr.bind(&limitWriter{w: req.Stderr, limit: l.OutputBytes, truncated: &p.result.StderrTruncated, kill: p.kill})
	if p.warm {
		<-p.ready
		p.cpu0.Store(int64(threadClock(int(p.tid.Load()))))
		go p.feed(warmRequest(req.Argv[1:], environment(p.in.spec, req, dir), dir), req.Stdin)
	}
	p.begin = time.Now()
	close(p.bound)
}

func (p *process) ID() string { return p.id }

// Wait returns the exec's result once it has ended.
func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	return sandbox.WaitDone(ctx, p.done, func() (sandbox.Result, error) { return p.result, p.err })
}

// Signal ends the module as the signal would end a process that does not
// handle it: WASI has no signals, so a module cannot catch one. Signals
// that are ignored by default do nothing; stopping is not possible.
func (p *process) Signal(_ context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	switch sig {
	case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGWINCH, syscall.SIGCONT:
		return nil
	case syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return &sandbox.UnsupportedError{What: "stopping a wasm exec", Why: "a WebAssembly module cannot be paused", Fix: "kill it (SIGKILL) instead"}
	case syscall.SIGKILL:
		p.kill(sandbox.ReasonKilled, "SIGKILL")
	default:
		p.kill("", sandbox.SignalName(sig))
	}
	return nil
}

// kill stops the module for reason (empty: a signal that the caller sent)
// as if signal ended it. The first kill counts.
func (p *process) kill(reason sandbox.Reason, signal string) {
	p.mu.Lock()
	if !p.killed {
		p.killed, p.killedBy, p.signal = true, reason, signal
	}
	p.mu.Unlock()
	p.cancel()
	if p.stdin != nil {
		_ = p.stdin.CloseWithError(errors.New("killed"))
	}
}

// run runs the module to its end and settles the result.
func (p *process) run() {
	defer close(p.done)
	defer p.cancel()
	r := &p.result
	alloc := &allocator{b: p.in.budget, reclaim: func() bool {
		// An exec short of memory takes the warm python3's; a warm
		// python3 not yet an exec's takes nobody's.
		select {
		case <-p.bound:
			return p.in.dropWarm()
		default:
			return false
		}
	}}
	exit, cpu, runErr := p.instantiate(alloc)
	select {
	case <-p.bound:
	default:
		return // a warm process that no exec took
	}
	defer p.in.forget(p.id)
	r.Usage.WallMS = time.Since(p.begin).Milliseconds()
	r.Usage.CPUMS = cpu.Milliseconds()
	r.Usage.MemoryPeakBytes = alloc.peak.Load()

	p.mu.Lock()
	killed, killedBy, signal := p.killed, p.killedBy, p.signal
	p.mu.Unlock()
	refused := alloc.refused.Load()
	switch {
	case killed:
		r.ExitCode, r.Signal = -1, signal
	case runErr != nil:
		// A trap (unreachable, out of bounds, stack overflow), or a module
		// that could not start: it crashed, as a process that aborts.
		r.ExitCode, r.Signal = -1, "SIGABRT"
		r.Message = "the program crashed: " + trapText(runErr)
	default:
		r.ExitCode = int(exit)
	}
	failed := r.ExitCode != 0
	if refused && failed && !killed {
		r.Reason = sandbox.ReasonOOM
	}
	r.Classify(killedBy, sandbox.Evidence{OOM: refused, DiskFull: p.diskFull.Load()})
	switch {
	case r.Reason == sandbox.ReasonOOM:
		r.Message = fmt.Sprintf("memory limit of %s reached: the program asked for more memory, was refused, and failed (Python raises MemoryError) — use less memory (e.g. process the data in chunks) or raise --memory",
			sandbox.FormatBytes(p.in.spec.Limits.MemoryBytes))
	case r.Message == "":
		r.Message = sandbox.Message(r, p.in.spec.Limits, p.timeout, p.cpuTime)
	}
}

// trapText is the first line of a module's failure, without wazero's
// stack trace.
func trapText(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// instantiate runs the module on this goroutine, locked to its thread,
// and returns its exit code and the CPU time it used.
func (p *process) instantiate(alloc *allocator) (exit uint32, cpu time.Duration, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p.tid.Store(int32(unix.Gettid()))
	if !p.warm {
		p.cpu0.Store(int64(threadCPU()))
	}
	close(p.ready)
	defer func() { cpu = threadCPU() - time.Duration(p.cpu0.Load()) }()
	defer func() {
		// wazero turns a trap into an error; anything else that panics
		// here ends this exec, never the daemon.
		if v := recover(); v != nil {
			err = fmt.Errorf("wasm runtime failure: %v", v)
		}
	}()

	l := p.in.spec.Limits
	if !alloc.prepay(p.mod.minBytes) {
		alloc.refused.Store(true)
		return 0, 0, fmt.Errorf("not enough memory to start: the module needs %s and the sandbox's other execs hold the rest of its %s",
			sandbox.FormatBytes(p.mod.minBytes), sandbox.FormatBytes(l.MemoryBytes))
	}
	defer alloc.settle()

	cfg := p.config()
	defer p.arm()()
	ctx := experimental.WithMemoryAllocator(p.ctx, alloc)
	mod, err := p.in.d.shared.rt.InstantiateModule(ctx, p.mod.compiled, cfg)
	if mod != nil {
		_ = mod.Close(context.WithoutCancel(ctx))
	}
	var ee *sys.ExitError
	switch {
	case err == nil:
		return 0, 0, nil
	case errors.As(err, &ee):
		return ee.ExitCode(), 0, nil
	}
	return 0, 0, err
}

// config is the module's view of the world: its arguments and environment,
// standard streams held to the output limit, /workspace and /tmp, the
// clocks, and a random source seeded for this exec.
func (p *process) config() wazero.ModuleConfig {
	// A warm process's exec is not known yet (bind sets it): it starts as
	// warmArgv and reads its exec from standard input.
	argv, env := warmArgv(), warmEnv(p.in.spec)
	if !p.warm {
		argv, env = append([]string(nil), p.req.Argv...), environment(p.in.spec, p.req, p.dir)
	}
	if p.mod.path == p.in.d.opts.Python {
		argv[0] = "python3"
	}
	stdin := io.Reader(strings.NewReader(""))
	switch {
	case p.warm:
		stdin = &firstRead{r: p.stdin, ch: p.waiting} // made with the process: bind feeds it
	case p.req.Stdin != nil:
		pr, pw := io.Pipe()
		p.stdin = pr
		go func() {
			_, err := io.Copy(pw, p.req.Stdin)
			_ = pw.CloseWithError(err)
		}()
		stdin = pr
	}
	full := func() { p.diskFull.Store(true) }
	mount := func(c wazero.FSConfig, fs experimentalsys.FS, guest string) wazero.FSConfig {
		return c.(sysfs.FSConfig).WithSysFSMount(fs, guest)
	}
	fsc := mount(wazero.NewFSConfig(), rootFS(), "/")
	fsc = mount(fsc, &mountFS{m: p.in.workspace, diskFull: full}, sandbox.Workspace)
	fsc = mount(fsc, &mountFS{m: p.in.tmp, diskFull: full}, "/tmp")
	if p.mod.path == p.in.d.opts.Python {
		fsc = mount(fsc, pythonSite(), pythonSiteDir)
	}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithArgs(argv...).
		WithStdin(stdin).
		WithStdout(&p.stdout).
		WithStderr(&p.stderr).
		WithFSConfig(fsc).
		WithWalltime(func() (int64, int32) { return p.in.clocks.walltime() }, 1000).
		WithNanotime(p.in.clocks.nanotime, 1000).
		WithNanosleep(func(ns int64) { p.sleep(time.Duration(ns)) }).
		WithRandSource(rand.NewChaCha8(p.seed))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		cfg = cfg.WithEnv(k, v)
	}
	return cfg
}

// sleep sleeps for d unless the exec is killed first.
func (p *process) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.ctx.Done():
	}
}

// environment is a command's environment: the defaults, the spec's, the
// request's, a later key replacing an earlier one; and PWD, the working
// directory, which python3 changes to as it starts.
func environment(spec sandbox.Spec, req sandbox.ExecRequest, dir string) []string {
	all := []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.Workspace, "LANG=C.UTF-8", "USER=sandbox", "HOSTNAME=" + spec.ID}
	all = append(all, spec.Env...)
	all = append(all, req.Env...)
	all = append(all, "PWD="+dir)
	seen := map[string]int{}
	var out []string
	for _, kv := range all {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
			continue
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// arm starts the exec's wall-clock timeout and CPU-time watch once it is
// bound (at once for a cold process), and returns what stops them.
func (p *process) arm() (stop func()) {
	var mu sync.Mutex
	var stops []func()
	stopped := false
	go func() {
		select {
		case <-p.bound:
		case <-p.ctx.Done():
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if p.timeout > 0 {
			t := time.AfterFunc(p.timeout, func() { p.kill(sandbox.ReasonTimeout, "SIGKILL") })
			stops = append(stops, func() { t.Stop() })
		}
		if p.cpuTime > 0 {
			stops = append(stops, p.watchCPU(int(p.tid.Load()), p.cpuTime))
		}
	}()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		for _, s := range stops {
			s()
		}
	}
}

// watchCPU kills the exec once the thread tid has used limit of CPU time.
func (p *process) watchCPU(tid int, limit time.Duration) (stop func()) {
	read := func() time.Duration { return threadClock(tid) }
	start := read()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if read()-start >= limit {
					p.kill(sandbox.ReasonCPUTime, "SIGKILL")
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// threadClock is the CPU time of thread tid (its CPUCLOCK_SCHED clock),
// which another thread may read.
func threadClock(tid int) time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(int32(^tid)<<3|6, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// firstRead closes ch on its first Read.
type firstRead struct {
	r    io.Reader
	once sync.Once
	ch   chan struct{}
}

func (f *firstRead) Read(b []byte) (int, error) {
	f.once.Do(func() { close(f.ch) })
	return f.r.Read(b)
}

// lateWriter is a process's standard stream: until the process is bound to
// an exec what it writes is dropped (a warm python3 writes nothing as it
// starts); then it goes to the exec's stream.
type lateWriter struct{ w atomic.Pointer[limitWriter] }

func (l *lateWriter) bind(w *limitWriter) { l.w.Store(w) }

func (l *lateWriter) Write(b []byte) (int, error) {
	if w := l.w.Load(); w != nil {
		return w.Write(b)
	}
	return len(b), nil
}

// limitWriter passes a stream on up to the output limit; past it, it cuts
// the output, says so, and kills the exec.
type limitWriter struct {
	w         io.Writer
	limit     int64
	n         int64
	truncated *bool
	kill      func(sandbox.Reason, string)
}

func (w *limitWriter) Write(b []byte) (int, error) {
	total := len(b)
	if left := w.limit - w.n; int64(len(b)) > left {
		b = b[:max(left, 0)]
		if !*w.truncated {
			*w.truncated = true
			w.kill(sandbox.ReasonOutputLimit, "SIGKILL")
		}
	}
	w.n += int64(len(b))
	if w.w != nil && len(b) > 0 {
		_, _ = w.w.Write(b)
	}
	if len(b) < total {
		return len(b), errors.New("output limit reached")
	}
	return total, nil
}
