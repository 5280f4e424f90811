package wasm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// newPythonDriver makes a driver with python.wasm, warm python3s or not.
func newPythonDriver(t *testing.T, cold bool) *wasm.Driver {
	t.Helper()
	testcap.Require(t, "wasm")
	d, err := wasm.New(wasm.Options{StateDir: t.TempDir(), ColdPython: cold})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Python(context.Background()); err != nil {
		t.Fatalf("python.wasm: %v", err)
	}
	return d
}

// waitWarm waits until sb has a warm python3 done starting: waiting on
// its standard input for an exec (before then, an exec that takes it
// waits, and counts the rest of its start-up as its own CPU).
func waitWarm(t *testing.T, sb sandbox.Instance) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if wasm.WarmWaiting(sb) { // started, and done starting
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox has no warm python3 30 s after its first python3")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmRun runs req on sb's warm python3 and fails unless a warm one ran it.
func warmRun(t *testing.T, sb sandbox.Instance, req sandbox.ExecRequest) (string, string, sandbox.Result) {
	t.Helper()
	waitWarm(t, sb)
	_, before := wasm.WarmState(sb)
	out, errOut, res := run(t, sb, req)
	if _, after := wasm.WarmState(sb); after != before+1 {
		t.Fatalf("%q did not run on a warm python3", req.Argv)
	}
	return out, errOut, res
}

// TestWarmPythonSameAsCold runs the same programs on a python3 started for
// each exec and on a warm one, and wants the same output, errors, exit
// code and reason from both: arguments, __main__, tracebacks, syntax
// errors, exits, the working directory, the environment, standard input,
// scripts and a script that is not there.
func TestWarmPythonSameAsCold(t *testing.T) {
	spec := sandbox.Spec{ID: "warmdiff"}
	cold := create(t, newPythonDriver(t, true), spec)
	warm := create(t, newPythonDriver(t, false), spec)
	script := `import sys, os
def f():
    raise KeyError("inner")
print(__name__, __file__, sys.argv, sys.path[0], os.getcwd())
try:
    f()
except KeyError as e:
    raise ValueError("outer") from e
`
	for _, sb := range []sandbox.Instance{cold, warm} {
		if err := sb.Files().Mkdir(context.Background(), "/workspace/lib", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := sb.Files().WriteFile(context.Background(), "/workspace/lib/s.py", strings.NewReader(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, warm, python("pass")) // the sandbox's first python3 warms the next
	cases := []struct {
		name string
		req  sandbox.ExecRequest
	}{
		{"print", python("print(1)")},
		{"argv", sandbox.ExecRequest{Argv: []string{"python3", "-c", "import sys; print(sys.argv, sys.orig_argv, sys.path[0])", "a", "-b", "c d"}}},
		{"main", python("print(__name__, sorted(globals()), __doc__, __spec__)")},
		{"modules", python("import sys; print(sorted(m for m in sys.modules if m.startswith('_airlock')), 'os' in globals())")},
		{"traceback", python("def f():\n    return 1/0\nf()")},
		{"syntax_error", python("x = (")},
		{"exit_code", python("import sys; print('out'); sys.exit(3)")},
		{"exit_message", python("import sys; sys.exit('bye')")},
		{"stderr", python("import sys; print('e', file=sys.stderr); raise SystemExit(0)")},
		{"atexit", python("import atexit; atexit.register(print, 'at exit'); print('body')")},
		{"dir", sandbox.ExecRequest{Argv: []string{"python3", "-c", "import os; print(os.getcwd(), os.environ['PWD'])"}, Dir: "/tmp"}},
		{"env", sandbox.ExecRequest{Argv: []string{"python3", "-c", "import os; print(sorted(os.environ.items()))"}, Env: []string{"FOO=bar", "HOME=/tmp"}}},
		{"stdin", sandbox.ExecRequest{Argv: []string{"python3", "-c", "import sys, os; print(repr(os.read(0, 3)), repr(sys.stdin.read()))"}}},
		{"no_stdin", python("import sys; print(repr(sys.stdin.read()))")},
		{"script", sandbox.ExecRequest{Argv: []string{"python3", "/workspace/lib/s.py", "x"}, Dir: "/tmp"}},
		{"no_script", sandbox.ExecRequest{Argv: []string{"python3", "/workspace/nope.py"}}},
		{"unicode", python("print('h\u00e9llo \u2603', len('\u2603'))")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := func() sandbox.ExecRequest {
				r := c.req
				if c.name == "stdin" {
					r.Stdin = strings.NewReader("hello\nworld")
				}
				return r
			}
			wantOut, wantErr, want := run(t, cold, req())
			gotOut, gotErr, got := warmRun(t, warm, req())
			if gotOut != wantOut || gotErr != wantErr {
				t.Errorf("a warm python3 printed\n%q\n%q\nwhere a cold one printed\n%q\n%q", gotOut, gotErr, wantOut, wantErr)
			}
			if got.ExitCode != want.ExitCode || got.Reason != want.Reason || got.Signal != want.Signal {
				t.Errorf("a warm python3 ended %d %s %s, a cold one %d %s %s", got.ExitCode, got.Reason, got.Signal, want.ExitCode, want.Reason, want.Signal)
			}
		})
	}
}

// TestWarmPythonRelativeScript: a script named relative to the working
// directory runs, and one that is not there is named by its full path, as
// python3 does on Linux. (A python3 started for the exec cannot do that:
// WASI starts it in /, and it opens its script before sitecustomize moves
// it to $PWD, so the reference run of TestWarmPythonSameAsCold names
// scripts by their full path.)
func TestWarmPythonRelativeScript(t *testing.T) {
	sb := create(t, newPythonDriver(t, false), sandbox.Spec{})
	if err := sb.Files().WriteFile(context.Background(), "/workspace/s.py", strings.NewReader("import sys\nprint(__file__, sys.argv, sys.path[0])\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ script, out, errOut string }{
		{"s.py", "s.py ['s.py', 'x'] /workspace\n", ""},
		{"./s.py", "./s.py ['./s.py', 'x'] /workspace\n", ""},
		{"nope.py", "", "python3: can't open file '/workspace/nope.py': [Errno 44] No such file or directory\n"},
	} {
		out, errOut, res := run(t, sb, sandbox.ExecRequest{Argv: []string{"python3", c.script, "x"}})
		if out != c.out || errOut != c.errOut {
			t.Errorf("python3 %s printed %q %q, want %q %q", c.script, out, errOut, c.out, c.errOut)
		}
		if want := map[bool]int{true: 0, false: 2}[c.errOut == ""]; res.ExitCode != want {
			t.Errorf("python3 %s exited %d, want %d", c.script, res.ExitCode, want)
		}
	}
}

// TestWarmPython: what a warm python3 leaves behind, and what it costs an
// exec. Each is used once (one exec's changes to the interpreter are not
// the next's); its start-up is not the exec's CPU time; python3 options
// and an environment python3 reads while it starts get a python3 of their
// own; its limits count from the exec; and an exec short of memory takes
// the warm one's.
func TestWarmPython(t *testing.T) {
	d := newPythonDriver(t, false)
	sb := create(t, d, sandbox.Spec{})
	_, _, first := run(t, sb, python("import builtins; builtins.LEFT = 1; print(1)"))

	t.Run("used_once", func(t *testing.T) {
		out, _, _ := warmRun(t, sb, python("import builtins; print(hasattr(builtins, 'LEFT')); builtins.LEFT = 2"))
		if out != "False\n" {
			t.Errorf("a warm python3 saw what an earlier exec left: %q", out)
		}
		out, _, _ = warmRun(t, sb, python("import builtins; print(hasattr(builtins, 'LEFT'))"))
		if out != "False\n" {
			t.Errorf("a warm python3 was used twice: %q", out)
		}
	})
	t.Run("cpu_time", func(t *testing.T) {
		_, _, res := warmRun(t, sb, python("print(1)"))
		t.Logf("print(1): cold %d ms of CPU, %d KiB of memory; warm %d ms, %d KiB", first.Usage.CPUMS, first.Usage.MemoryPeakBytes>>10, res.Usage.CPUMS, res.Usage.MemoryPeakBytes>>10)
		if res.Usage.CPUMS*2 > first.Usage.CPUMS {
			t.Errorf("a warm python3's print(1) used %d ms of CPU, a cold one's %d: its start-up was counted", res.Usage.CPUMS, first.Usage.CPUMS)
		}
	})
	t.Run("cold_when_needed", func(t *testing.T) {
		waitWarm(t, sb)
		for _, req := range []sandbox.ExecRequest{
			{Argv: []string{"python3", "-S", "-c", "import sys; print('site' in sys.modules)"}},
			{Argv: []string{"python3", "-c", "import sys; print(sys.flags.dont_write_bytecode)"}, Env: []string{"PYTHONDONTWRITEBYTECODE=1"}},
			{Argv: []string{"python3", "-"}, Stdin: strings.NewReader("print('from stdin')")},
		} {
			_, before := wasm.WarmState(sb)
			out, errOut, res := run(t, sb, req)
			if _, after := wasm.WarmState(sb); after != before {
				t.Errorf("%q ran on a warm python3", req.Argv)
			}
			if res.ExitCode != 0 || out == "" {
				t.Errorf("%q: exit %d, %q %q", req.Argv, res.ExitCode, out, errOut)
			}
		}
	})
	t.Run("timeout_from_exec", func(t *testing.T) {
		waitWarm(t, sb)
		time.Sleep(1500 * time.Millisecond) // longer than the exec's timeout
		_, _, res := warmRun(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", "import time; time.sleep(0.2); print('ok')"}, Timeout: time.Second})
		if res.ExitCode != 0 {
			t.Errorf("an exec on a python3 warm for longer than its timeout: %d %s %s", res.ExitCode, res.Reason, res.Message)
		}
		_, _, res = warmRun(t, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", "import time; time.sleep(5)"}, Timeout: 300 * time.Millisecond})
		if res.Reason != sandbox.ReasonTimeout {
			t.Errorf("a warm python3's exec past its timeout ended %s, not timeout", res.Reason)
		}
	})
	t.Run("memory_reclaimed", func(t *testing.T) {
		small := create(t, d, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 96 << 20}})
		run(t, small, python("pass"))
		waitWarm(t, small)
		// More than is left with a warm python3 holding its memory.
		_, errOut, res := run(t, small, python("b = bytearray(80 << 20); print(len(b))"))
		if res.ExitCode != 0 {
			t.Fatalf("an exec that needs the warm python3's memory failed: %s %s %q", res.Reason, res.Message, errOut)
		}
		if ready, _ := wasm.WarmState(small); ready {
			t.Error("a sandbox that gave its warm python3 up for memory started another")
		}
	})
}
