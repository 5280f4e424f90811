package wasm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/fsroot"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver runs sandboxes of WebAssembly modules in this process.
type Driver struct {
	opts Options

	// shared is the process's runtime for this cache directory, made on
	// first use, so that a driver that is only listed (doctor, the driver
	// table) costs nothing.
	shared *shared

	mu       sync.Mutex
	reserved int64 // memory limits of the live sandboxes
}

// shared is a wazero runtime and the modules compiled in it. Every driver
// of the process with the same cache directory shares one: compiled code
// is read-only, and a module is read and compiled once per process.
type shared struct {
	once sync.Once
	rt   wazero.Runtime
	err  error

	mu      sync.Mutex
	modules map[string]*module // by host path
}

// runtimes are the process's shared runtimes, by cache directory.
var runtimes = struct {
	sync.Mutex
	m map[string]*shared
}{m: map[string]*shared{}}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Describer = (*Driver)(nil)
)

// New returns a Wasm driver. It does no I/O: what the host lacks is reported
// by Probe and Create.
func New(opts Options) (*Driver, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Python == "" {
		opts.Python = PythonPath()
	}
	if opts.StateDir == "" {
		opts.StateDir = defaultStateDir()
	}
	if opts.CacheDir == "" {
		opts.CacheDir = defaultCacheDir()
	}
	if opts.MaxMemoryBytes == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			opts.MaxMemoryBytes = int64(si.Totalram) * int64(si.Unit) / 2
		} else {
			opts.MaxMemoryBytes = 4 << 30
		}
	}
	runtimes.Lock()
	sh := runtimes.m[opts.CacheDir]
	if sh == nil {
		sh = &shared{modules: map[string]*module{}}
		runtimes.m[opts.CacheDir] = sh
	}
	runtimes.Unlock()
	return &Driver{opts: opts, shared: sh}, nil
}

// PythonPath is where the driver looks for python.wasm:
// $AIRLOCK_WASM_PYTHON, else DefaultPython.
func PythonPath() string {
	if p := os.Getenv("AIRLOCK_WASM_PYTHON"); p != "" {
		return p
	}
	return DefaultPython
}

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/run/airlock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); strings.HasPrefix(d, "/") {
		return filepath.Join(d, "airlock")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "airlock", "run")
	}
	return ""
}

func defaultCacheDir() string {
	if os.Geteuid() == 0 {
		base := os.Getenv("AIRLOCK_CACHE")
		if !strings.HasPrefix(base, "/") {
			base = "/var/cache/airlock"
		}
		return filepath.Join(base, "wasm", "compiled")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "airlock", "wasm", "compiled")
	}
	return "-"
}

// Name is "wasm".
func (d *Driver) Name() string { return "wasm" }

// Capabilities: python3 and the file API; no shell, background execs,
// egress or host mounts.
func (d *Driver) Capabilities() sandbox.Capabilities { return capabilities }

// Describe says which runtime and Python the driver uses.
func (d *Driver) Describe() string {
	py := "no python.wasm (make wasm-python)"
	if _, err := os.Stat(d.opts.Python); err == nil {
		py = "python.wasm " + d.opts.Python
	}
	return "wazero, " + py
}

// runtime makes the driver's one wazero runtime: compiled code where
// wazero has a compiler for this machine, its compilation cache on disk,
// guest code that stops when its context is done, and WASI.
func (d *Driver) runtime() (wazero.Runtime, error) {
	sh := d.shared
	sh.once.Do(func() {
		ctx := context.Background()
		// No DWARF stack traces: reading python.wasm's debug sections on every
		// trap or kill takes seconds of CPU.
		cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithDebugInfoEnabled(false)
		if dir := d.opts.CacheDir; dir != "-" && dir != "" {
			if err := privateDir(dir); err != nil {
				d.opts.Logger.Warn("wasm: no compilation cache; every process compiles its modules again", "dir", dir, "err", err)
			} else if cache, err := wazero.NewCompilationCacheWithDir(dir); err != nil {
				d.opts.Logger.Warn("wasm: no compilation cache", "dir", dir, "err", err)
			} else {
				cfg = cfg.WithCompilationCache(cache)
			}
		}
		rt := wazero.NewRuntimeWithConfig(ctx, cfg)
		if err := instantiateWASI(ctx, rt); err != nil {
			_ = rt.Close(ctx)
			sh.err = err
			return
		}
		sh.rt = rt
	})
	return sh.rt, sh.err
}

// privateDir makes dir (and its parents) and checks that it is this
// user's own and that nobody else may write to it: the compilation cache
// holds machine code this process runs.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s must be a directory owned by uid %d that only its owner can write", dir, os.Geteuid())
	}
	return nil
}

// Probe checks that this host can run wasm sandboxes: openat2 (Linux 5.6)
// for their files, a state directory, and a working runtime. Whether
// python.wasm is installed is Python's to say.
func (d *Driver) Probe(ctx context.Context) error {
	if d.opts.StateDir == "" {
		return &sandbox.UnsupportedError{What: "wasm", Why: "no directory for sandbox state", Fix: "set XDG_RUNTIME_DIR or HOME"}
	}
	if err := os.MkdirAll(d.opts.StateDir, 0o755); err != nil {
		return &sandbox.UnsupportedError{What: "wasm", Why: fmt.Sprintf("cannot make the state directory: %v", err), Fix: "run as root, or set XDG_RUNTIME_DIR to a directory you own"}
	}
	r, err := fsroot.Open(d.opts.StateDir, -1, -1, "/")
	if err != nil {
		return &sandbox.UnsupportedError{What: "wasm", Why: err.Error(), Fix: "run on Linux 5.6 or later"}
	}
	_ = r.Close()
	if _, err := d.runtime(); err != nil {
		return &sandbox.UnsupportedError{What: "wasm", Why: err.Error()}
	}
	if _, err := os.Stat(d.opts.Python); err == nil {
		// Load python.wasm now rather than in the first exec: a second
		// from the compilation cache, several without it.
		go func() { _, _ = d.module(context.WithoutCancel(ctx), d.opts.Python) }()
	}
	return nil
}

// Python says whether python3 can run: nil when python.wasm is there and
// compiles. The first call compiles it (seconds without the cache).
func (d *Driver) Python(ctx context.Context) error {
	_, err := d.module(ctx, d.opts.Python)
	return err
}

// module is a compiled WASI command module.
type module struct {
	path     string
	once     sync.Once
	compiled wazero.CompiledModule
	minBytes int64 // its initial memory
	err      error
	size     int64
	mtime    int64
}

// module returns the module at path, read and compiled once for the
// driver's life (again only when the file changed).
func (d *Driver) module(ctx context.Context, path string) (*module, error) {
	rt, err := d.runtime()
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		if path == d.opts.Python && errors.Is(err, os.ErrNotExist) {
			return nil, &sandbox.UnsupportedError{What: "python3 on wasm", Why: "python.wasm is not installed at " + path,
				Fix: "run make wasm-python (or set AIRLOCK_WASM_PYTHON to a CPython built for WASI)"}
		}
		return nil, fmt.Errorf("wasm module: %w", err)
	}
	sh := d.shared
	sh.mu.Lock()
	m := sh.modules[path]
	if m == nil || m.size != fi.Size() || m.mtime != fi.ModTime().UnixNano() {
		m = &module{path: path, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
		sh.modules[path] = m
	}
	sh.mu.Unlock()
	m.once.Do(func() { m.compile(ctx, rt) })
	return m, m.err
}

func (m *module) compile(ctx context.Context, rt wazero.Runtime) {
	b, err := os.ReadFile(m.path)
	if err != nil {
		m.err = fmt.Errorf("read wasm module: %w", err)
		return
	}
	cm, err := rt.CompileModule(context.WithoutCancel(ctx), b)
	if err != nil {
		m.err = fmt.Errorf("%w: compile wasm module %s: %w", sandbox.ErrInvalid, filepath.Base(m.path), err)
		return
	}
	if _, ok := cm.ExportedFunctions()["_start"]; !ok {
		_ = cm.Close(ctx)
		m.err = fmt.Errorf("%w: wasm module %s exports no _start: give a WASI command module (a reactor or a library cannot run as a command)", sandbox.ErrInvalid, filepath.Base(m.path))
		return
	}
	for _, mem := range cm.ExportedMemories() {
		m.minBytes = max(m.minBytes, int64(mem.Min())*pageSize)
	}
	for _, mem := range cm.ImportedMemories() {
		_ = mem
		_ = cm.Close(ctx)
		m.err = fmt.Errorf("%w: wasm module %s imports its memory; give a WASI command module that defines its own", sandbox.ErrInvalid, filepath.Base(m.path))
		return
	}
	m.compiled = cm
}

// admit reserves n bytes of the driver's memory bound for a new sandbox.
func (d *Driver) admit(n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reserved+n > d.opts.MaxMemoryBytes {
		return fmt.Errorf("%w: the wasm sandboxes of this daemon may use %s of memory together and %s is taken: close a sandbox, or give this one less --memory",
			sandbox.ErrLimit, sandbox.FormatBytes(d.opts.MaxMemoryBytes), sandbox.FormatBytes(d.reserved))
	}
	d.reserved += n
	return nil
}

func (d *Driver) release(n int64) {
	d.mu.Lock()
	d.reserved -= n
	d.mu.Unlock()
}

func (d *Driver) locksDir() string     { return filepath.Join(d.opts.StateDir, "sandboxes") }
func (d *Driver) sandboxesDir() string { return filepath.Join(d.opts.StateDir, "wasm") }

// Create makes a sandbox: its directories, its file API, and, when the
// spec names a module, that module compiled.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := d.Probe(ctx); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = sandbox.NewID()
	}
	spec.Limits = spec.Limits.WithDefaults()
	var mod *module
	if spec.Module != "" {
		var err error
		if mod, err = d.module(ctx, spec.Module); err != nil {
			return nil, err
		}
		if mod.minBytes > spec.Limits.MemoryBytes {
			return nil, fmt.Errorf("%w: module %s needs %s of memory to start, more than the sandbox's limit of %s: raise --memory",
				sandbox.ErrLimit, filepath.Base(spec.Module), sandbox.FormatBytes(mod.minBytes), sandbox.FormatBytes(spec.Limits.MemoryBytes))
		}
	}

	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	lock, err := hostlock.Sandbox(d.locksDir(), spec.ID)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	undo = append(undo, lock.Release)
	if err := d.admit(spec.Limits.MemoryBytes); err != nil {
		return nil, err
	}
	undo = append(undo, func() { d.release(spec.Limits.MemoryBytes) })

	dir := filepath.Join(d.sandboxesDir(), spec.ID)
	if err := os.MkdirAll(d.sandboxesDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	_ = os.RemoveAll(dir) // a dead airlock's, under the lock we now hold
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })
	in := &instance{d: d, spec: spec, dir: dir, lock: lock, module: mod, done: make(chan struct{}),
		execs: map[string]*process{}, budget: &budget{limit: spec.Limits.MemoryBytes}}
	for _, m := range []struct {
		guest string
		size  int64
		dst   **mount
	}{{sandbox.Workspace, spec.Limits.DiskBytes, &in.workspace}, {"/tmp", spec.Limits.TmpBytes, &in.tmp}} {
		host := filepath.Join(dir, strings.TrimPrefix(m.guest, "/"))
		if err := os.Mkdir(host, 0o755); err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		mt, err := newMount(m.guest, host, m.size)
		if err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
		}
		undo = append(undo, mt.close)
		*m.dst = mt
	}
	root, err := fsroot.Open(dir, -1, -1, sandbox.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", spec.ID, err)
	}
	undo = append(undo, func() { _ = root.Close() })
	in.files = &files{in: in, root: root}
	if _, err := rand.Read(in.seed[:]); err != nil {
		return nil, fmt.Errorf("create sandbox %s: seed its random source: %w", spec.ID, err)
	}
	in.clocks = clocks{base: nowMonotonic()}
	undo = nil
	d.opts.Logger.Debug("wasm sandbox created", "sandbox_id", spec.ID)
	return in, nil
}

// Sweep removes the directories of sandboxes whose airlock died.
func (d *Driver) Sweep(ctx context.Context) error {
	ents, err := os.ReadDir(d.sandboxesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep wasm sandboxes: %w", err)
	}
	var errs []error
	for _, e := range ents {
		id := e.Name()
		if !sandbox.ValidID(id) {
			continue
		}
		lock, err := hostlock.Sandbox(d.locksDir(), id)
		if err != nil {
			continue // alive, or not ours to judge
		}
		if err := os.RemoveAll(filepath.Join(d.sandboxesDir(), id)); err != nil {
			errs = append(errs, err)
		}
		lock.Release()
	}
	return errors.Join(errs...)
}
