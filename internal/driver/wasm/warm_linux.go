package wasm

import (
	"encoding/binary"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A warm python3 is CPython already started in a sandbox, waiting on its
// standard input for the exec it will run: CPython's own start-up (about
// 150 ms of CPU in WebAssembly, most of an exec of python3 -c 'print(1)')
// is then paid before the exec, off its path. Each is used once, by one
// exec, so an exec never sees another's interpreter; a sandbox keeps one
// ready from its first python3 on (instance.warm), started again as each
// is taken. Every python3 -c CODE and python3 SCRIPT runs this way (one
// started for it when none is ready), so that what an exec sees never
// depends on whether one was. Decision 58 has the measurements and what
// it costs.

// warmSource is what a warm python3 runs: it reads its exec's working
// directory, arguments and environment (warmRequest), takes them as its
// own, and runs the program as python3 -c CODE or python3 SCRIPT would,
// in __main__, with tracebacks that start at the program's own code. What
// it reads is exactly the request: the rest of standard input is the
// exec's.
const warmSource = `import os, sys
def _read(n):
    b = b''
    while len(b) < n:
        c = os.read(0, n - len(b))
        if not c:
            os._exit(0)
        b += c
    return b
def _run():
    n = int.from_bytes(_read(4), 'big')
    f = _read(n).decode('utf-8', 'surrogateescape').split('\0')
    cwd, argc = f[0], int(f[1])
    argv, env = f[2:2 + argc], f[2 + argc:]
    os.environ.clear()
    for kv in env:
        k, _, v = kv.partition('=')
        os.environ[k] = v
    try:
        os.chdir(cwd)
    except OSError:
        pass
    sys.orig_argv[:] = ['python3'] + argv
    g = sys.modules['__main__'].__dict__
    if argv[0] == '-c':
        sys.argv[:] = ['-c'] + argv[2:]
        src, name = argv[1], '<string>'
    else:
        name = argv[0]
        sys.argv[:] = argv
        try:
            with open(name, 'rb') as fh:
                src = fh.read()
        except OSError as e:
            sys.stderr.write("python3: can't open file %r: [Errno %d] %s\n" % (os.path.abspath(name), e.errno, e.strerror))
            sys.exit(2)
        sys.path[0] = os.path.dirname(os.path.realpath(name))
        g['__file__'] = name
        g['__cached__'] = None
    try:
        exec(compile(src, name, 'exec'), g)
    except SystemExit:
        raise
    except BaseException as e:
        e.__traceback__ = e.__traceback__.tb_next
        sys.excepthook(type(e), e, e.__traceback__)
        sys.exit(1)
_run()
`

// warmArgv is a warm python3's command line: warmSource, run in a
// namespace of its own so that __main__ holds only what the exec puts
// there.
func warmArgv() []string {
	return []string{"python3", "-c", "exec(compile(" + strconv.Quote(warmSource) + ", '<airlock>', 'exec'), {'__name__': '_airlock'})"}
}

// warmEnv is the environment a warm python3 starts with: the sandbox's,
// in /workspace.
func warmEnv(spec sandbox.Spec) []string {
	return environment(spec, sandbox.ExecRequest{}, sandbox.Workspace)
}

// warmable reports whether a warm python3 runs the exec of python3 with
// args (after the command's name) in environment env exactly as a python3
// started for it would: python3 -c CODE or python3 SCRIPT, with no option
// of the interpreter's own, and the same environment as far as python3
// reads it while it starts (PYTHON*, LANG, LC_*). Anything else starts a
// python3 of its own.
func warmable(args, env, warm []string) bool {
	switch {
	case len(args) == 0:
		return false
	case args[0] == "-c":
		if len(args) < 2 {
			return false
		}
	case args[0] == "" || args[0][0] == '-':
		return false
	}
	for _, a := range args {
		if strings.ContainsRune(a, 0) {
			return false
		}
	}
	return slices.Equal(startupEnv(env), startupEnv(warm))
}

// startupEnv is the part of env python3 reads as it starts, sorted.
func startupEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PYTHON") || strings.HasPrefix(k, "LC_") || k == "LANG" {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

// warmRequest is an exec as a warm python3 reads it: a 4-byte big-endian
// length, then the working directory, the number of arguments, the
// arguments and the environment, separated by NULs (none of which may
// hold one).
func warmRequest(args, env []string, dir string) []byte {
	fields := append([]string{dir, strconv.Itoa(len(args))}, args...)
	body := strings.Join(append(fields, env...), "\x00")
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// feed writes the exec's request to a warm python3, then the exec's own
// standard input, and closes it.
func (p *process) feed(req []byte, stdin io.Reader) {
	_, err := p.stdinW.Write(req)
	if err == nil && stdin != nil {
		_, err = io.Copy(p.stdinW, stdin)
	}
	_ = p.stdinW.CloseWithError(err)
}

// warmRoom is the free memory a sandbox must have to keep a warm python3
// (which holds about 12 MiB): a sandbox near its limit keeps its memory
// for its execs.
const warmRoom = 64 << 20

// takeWarm returns the sandbox's warm python3, or nil when it has none
// ready. The caller holds in.mu.
func (in *instance) takeWarm() *process {
	w := in.warm
	in.warm = nil
	if w == nil {
		return nil
	}
	select {
	case <-w.done: // it failed to start, or was reclaimed
		return nil
	default:
		return w
	}
}

// newWarm starts a python3 of mod that waits for its exec (bind).
func (in *instance) newWarm(mod *module) *process {
	w := newProcess(in, mod, in.nextSeed())
	w.warm, w.waiting = true, make(chan struct{})
	w.stdin, w.stdinW = io.Pipe()
	go w.run()
	return w
}

// startWarm starts a warm python3 of mod for the sandbox's next exec of
// python3, unless it has one, is closed, gave one up for memory, or has
// too little memory free. The caller holds in.mu.
func (in *instance) startWarm(mod *module) {
	if in.warm != nil || in.closed || in.lean || in.d.opts.ColdPython ||
		in.budget.limit-in.budget.used.Load() < warmRoom {
		return
	}
	in.warm = in.newWarm(mod)
}

// dropWarm ends the sandbox's warm python3, if it has one, so that an exec
// short of memory can have its memory, and reports whether it freed any.
// The sandbox starts no other: its memory is its execs'.
func (in *instance) dropWarm() bool {
	in.mu.Lock()
	w := in.warm
	in.warm, in.lean = nil, true
	in.mu.Unlock()
	if w == nil {
		return false
	}
	w.kill(sandbox.ReasonKilled, "SIGKILL")
	select {
	case <-w.done:
		return true
	case <-time.After(killWait):
		return false
	}
}
