package wasm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// instance is one wasm sandbox: two directories, the execs running in it,
// and its share of memory.
type instance struct {
	d      *Driver
	spec   sandbox.Spec
	dir    string
	lock   *hostlock.Lock
	module *module // the spec's own module; nil when none
	budget *budget
	files  *files
	clocks clocks
	seed   [32]byte

	workspace, tmp *mount

	mu     sync.Mutex
	closed bool
	next   int
	execs  map[string]*process
	rng    *rand.ChaCha8 // made from seed; each exec's source is drawn from it
	done   chan struct{}
	// warm is a python3 started for the next exec of python3 (warm_linux.go);
	// python is set once the sandbox has run python3, and lean once it gave
	// a warm python3 up for memory.
	warm     *process
	python   bool
	lean     bool
	warmRuns int // execs that a warm python3 ran
}

var _ sandbox.Instance = (*instance)(nil)

func nowMonotonic() time.Time { return time.Now() }

func (in *instance) ID() string              { return in.spec.ID }
func (in *instance) Files() sandbox.Files    { return in.files }
func (in *instance) Done() <-chan struct{}   { return in.done }
func (in *instance) Layers() []sandbox.Layer { return []sandbox.Layer{sandbox.LayerWasm} }

// pythonNames are the commands that run python.wasm.
var pythonNames = []string{"python3", "python", "python3.12"}

// binDirs are where a command may be named by path.
var binDirs = []string{"/usr/local/bin", "/usr/bin", "/bin"}

// command finds the module argv0 names: python3, or the sandbox's or the
// driver's own module by its name (the file's name without .wasm), each
// also by path in a bin directory. Anything else is not found (127).
func (in *instance) command(ctx context.Context, argv0 string) (*module, error) {
	name := argv0
	if strings.Contains(argv0, "/") {
		dir, base := path.Split(path.Clean(argv0))
		if !containsStr(binDirs, path.Clean(dir)) {
			return nil, in.notFound(argv0)
		}
		name = base
	}
	if containsStr(pythonNames, name) {
		m, err := in.d.module(ctx, in.d.opts.Python)
		var ue *sandbox.UnsupportedError
		if errors.As(err, &ue) {
			return nil, &sandbox.CommandError{Code: 127, Msg: argv0 + ": not found: " + ue.Why + "; " + ue.Fix}
		}
		return m, err
	}
	for _, p := range []string{in.spec.Module, in.d.opts.Module} {
		if p != "" && strings.TrimSuffix(path.Base(p), ".wasm") == name {
			return in.d.module(ctx, p)
		}
	}
	return nil, in.notFound(argv0)
}

func (in *instance) notFound(argv0 string) error {
	what := "python3"
	for _, p := range []string{in.spec.Module, in.d.opts.Module} {
		if p != "" {
			what += " and " + strings.TrimSuffix(path.Base(p), ".wasm")
		}
	}
	return &sandbox.CommandError{Code: 127, Msg: fmt.Sprintf("%s: command not found: a wasm sandbox runs %s, and has no shell or other programs", argv0, what)}
}

func containsStr(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// mountOf returns the mount that the absolute guest path p lies in and p's
// path inside it, or nil for the read-only root.
func (in *instance) mountOf(p string) (*mount, string) {
	for _, m := range []*mount{in.workspace, in.tmp} {
		if p == m.guest {
			return m, "."
		}
		if rest, ok := strings.CutPrefix(p, m.guest+"/"); ok {
			return m, rest
		}
	}
	return nil, ""
}

// Start starts a command: it instantiates the command's module, which runs
// until it exits, is killed, times out, or the sandbox closes.
func (in *instance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	in.mu.Lock()
	closed := in.closed
	in.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("start in sandbox %s: %w", in.spec.ID, sandbox.ErrClosed)
	}
	mod, err := in.command(ctx, req.Argv[0])
	if err != nil {
		return nil, err
	}
	dir := req.Dir
	if dir == "" {
		dir = sandbox.Workspace
	}
	dir = path.Clean(dir)
	if dir != "/" {
		m, rel := in.mountOf(dir)
		if m == nil {
			return nil, &sandbox.CommandError{Code: 126, Msg: fmt.Sprintf("working directory %s: a wasm sandbox has only /, /workspace and /tmp", dir)}
		}
		if st, errno := (&mountFS{m: m}).Stat(rel); errno != 0 || !st.Mode.IsDir() {
			return nil, &sandbox.CommandError{Code: 126, Msg: fmt.Sprintf("working directory %s does not exist: make it first (mkdir through the file API), or run elsewhere", dir)}
		}
	}

	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, fmt.Errorf("start in sandbox %s: %w", in.spec.ID, sandbox.ErrClosed)
	}
	in.next++
	id := "e" + strconv.Itoa(in.next)
	var p *process
	python := mod.path == in.d.opts.Python
	switch {
	case python && !in.d.opts.ColdPython && warmable(req.Argv[1:], environment(in.spec, req, dir), warmEnv(in.spec)):
		// python3 -c CODE and python3 SCRIPT run on a warm python3: the
		// sandbox's, else one started now.
		if p = in.takeWarm(); p != nil {
			in.warmRuns++
		} else {
			p = in.newWarm(mod)
		}
	default:
		p = newProcess(in, mod, in.nextSeed())
	}
	p.bind(id, req, dir)
	if !p.warm {
		go p.run()
	}
	in.execs[id] = p
	if python {
		in.python = true
		in.startWarm(mod)
	}
	return p, nil
}

// nextSeed is the seed of a new process's random source, drawn from the
// sandbox's. The caller holds in.mu.
func (in *instance) nextSeed() [32]byte {
	if in.rng == nil {
		in.rng = rand.NewChaCha8(in.seed)
	}
	var seed [32]byte
	_, _ = in.rng.Read(seed[:])
	return seed
}

// forget drops an ended exec.
func (in *instance) forget(id string) {
	in.mu.Lock()
	delete(in.execs, id)
	in.mu.Unlock()
}

// Close kills every exec, waits for them to stop, and removes the
// sandbox's files. It succeeds when ctx is done.
func (in *instance) Close(ctx context.Context) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		<-in.done
		return nil
	}
	in.closed = true
	execs := make([]*process, 0, len(in.execs)+1)
	for _, p := range in.execs {
		execs = append(execs, p)
	}
	if in.warm != nil {
		execs = append(execs, in.warm)
		in.warm = nil
	}
	in.mu.Unlock()
	for _, p := range execs {
		p.kill(sandbox.ReasonKilled, "SIGKILL")
	}
	var errs []error
	for _, p := range execs {
		select {
		case <-p.done:
		case <-time.After(killWait):
			// Its module is closed and its memory is freed when it stops;
			// its files are removed below all the same.
			errs = append(errs, fmt.Errorf("exec %s did not stop within %v", p.id, killWait))
		}
	}
	_ = in.files.root.Close()
	in.workspace.close()
	in.tmp.close()
	if err := os.RemoveAll(in.dir); err != nil {
		errs = append(errs, err)
	}
	in.d.release(in.spec.Limits.MemoryBytes)
	in.lock.Release()
	close(in.done)
	if err := errors.Join(errs...); err != nil {
		in.d.opts.Logger.Warn("wasm sandbox closed with errors", "sandbox_id", in.spec.ID, "err", err)
	}
	return nil
}
