package sandboxtest

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ptyCases are the terminal cases: a command on a terminal the sandbox
// made (ExecRequest.PTY), typed into as a person would, resized, and held
// to the same limits as a command on pipes. A driver without terminals
// (Capabilities.PTY false) declares them Unsupported.
func ptyCases() []testCase {
	interactive := []need{needPTY, needShell}
	return []testCase{
		{name: "python_repl", needs: interactive, run: testPTYPython},
		{name: "shell", alone: true, needs: interactive, run: testPTYShell},
		{name: "own_terminals", needs: interactive, run: testPTYOwnTerminals},
		{name: "output_limit", needs: []need{needPTY}, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.OutputBytes = 256 << 10 }, run: testPTYOutputLimit},
		{name: "timeout", alone: true, needs: []need{needPTY}, run: testPTYTimeout},
		{name: "owns_its_tree", needs: []need{needPTY, needFiles}, run: testPTYTree},
		{name: "resize_without_pty", needs: []need{needPTY}, run: testResizeWithoutPTY},
	}
}

// term is a command running on a terminal, as the test types into it.
type term struct {
	t   *testing.T
	p   sandbox.Process
	in  *io.PipeWriter
	out syncBuffer
	// seen is how much of out earlier expects consumed.
	seen int
}

// startTerm starts argv on a terminal of size.
func (e *env) startTerm(t *testing.T, size sandbox.TermSize, argv ...string) *term {
	t.Helper()
	r, w := io.Pipe()
	tm := &term{t: t, in: w}
	p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{Argv: argv, Env: []string{"PS1=" + prompt}, PTY: &size, Stdin: r, Stdout: &tm.out, Stderr: failWriter{t}})
	if err != nil {
		t.Fatalf("start %q on a terminal: %v", argv, err)
	}
	tm.p = p
	t.Cleanup(func() {
		w.Close()
		_ = p.Signal(context.Background(), syscall.SIGKILL)
	})
	return tm
}

// failWriter fails the test when a command on a terminal writes to
// Stderr: the terminal carries all of its output.
type failWriter struct{ t *testing.T }

func (f failWriter) Write(p []byte) (int, error) {
	f.t.Errorf("a command on a terminal wrote %q to Stderr; its output must come on Stdout alone", p)
	return len(p), nil
}

// typeIn sends s to the terminal, as typed.
func (tm *term) typeIn(s string) {
	tm.t.Helper()
	done := make(chan error, 1)
	go func() { _, err := io.WriteString(tm.in, s); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			tm.t.Fatalf("type %q: %v", s, err)
		}
	case <-time.After(10 * time.Second):
		tm.t.Fatalf("typing %q did not finish in 10 s: the terminal reads no input", s)
	}
}

// prompt is the interactive shells' prompt (PS1).
const prompt = "pty$ "

// command waits for the shell's prompt, then types line and Enter.
func (tm *term) command(line string) {
	tm.t.Helper()
	tm.expect(prompt)
	tm.typeIn(line + "\n")
}

// expect waits until the output after what earlier expects consumed holds
// want, and consumes it.
func (tm *term) expect(want string) {
	tm.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		all := tm.out.String()
		if i := strings.Index(all[tm.seen:], want); i >= 0 {
			tm.seen += i + len(want)
			return
		}
		if time.Now().After(deadline) {
			tm.t.Fatalf("the terminal did not show %q within 15 s; it showed %s", want, clip(all[tm.seen:]))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the command to end.
func (tm *term) wait() sandbox.Result {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := tm.p.Wait(ctx)
	if err != nil {
		tm.t.Fatalf("wait for the command on the terminal: %v; it showed %s", err, clip(tm.out.String()))
	}
	return res
}

func testPTYPython(t *testing.T, e *env) {
	tm := e.startTerm(t, sandbox.TermSize{Rows: 24, Cols: 80}, "python3", "-i", "-q")
	tm.expect(">>> ")
	tm.typeIn("1+1\n")
	// The terminal echoes the input; the answer is on a line of its own.
	tm.expect("1+1\r\n2\r\n>>> ")
	tm.typeIn("import os, sys; print(os.isatty(0), os.isatty(1), os.isatty(2), os.getsid(0) == os.getpid())\n")
	tm.expect("\r\nTrue True True True\r\n")
	tm.typeIn("sys.exit(3)\n")
	res := tm.wait()
	if res.ExitCode != 3 || res.Reason != sandbox.ReasonExit || res.Signal != "" {
		t.Errorf("sys.exit(3) on a terminal: want exit 3, reason exit; got %s", describe(res))
	}
}

func testPTYShell(t *testing.T, e *env) {
	tm := e.startTerm(t, sandbox.TermSize{Rows: 24, Cols: 80}, "sh", "-i")
	tm.command("stty size")
	tm.expect("\n24 80\r\n")

	rz, ok := tm.p.(sandbox.Resizer)
	if !ok {
		t.Fatalf("a process on a terminal (%T) is not a sandbox.Resizer", tm.p)
	}
	if err := rz.Resize(e.ctx, sandbox.TermSize{Rows: 40, Cols: 132}); err != nil {
		t.Fatalf("resize: %v", err)
	}
	tm.command("stty size")
	tm.expect("\n40 132\r\n")
	if err := rz.Resize(e.ctx, sandbox.TermSize{Rows: 0, Cols: 80}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("resize to 0 rows: got %v, want an error wrapping ErrInvalid", err)
	}

	// Ctrl-C reaches the foreground job, not the shell.
	tm.command("sleep 30; echo slept")
	tm.expect("sleep 30; echo slept\r\n")
	time.Sleep(300 * time.Millisecond) // let sleep start
	start := time.Now()
	tm.typeIn("\x03")
	tm.command("echo alive-$((40+2))")
	tm.expect("alive-42\r\n")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("after Ctrl-C the shell answered only after %v: sleep was not interrupted", d)
	}
	if strings.Contains(tm.out.String(), "\nslept\r\n") {
		t.Errorf("Ctrl-C did not interrupt the command line: %s", clip(tm.out.String()))
	}

	tm.command("exit 7")
	res := tm.wait()
	if res.ExitCode != 7 || res.Reason != sandbox.ReasonExit {
		t.Errorf("exit 7 on a terminal: want exit 7, reason exit; got %s", describe(res))
	}
}

func testPTYOwnTerminals(t *testing.T, e *env) {
	tm := e.startTerm(t, sandbox.TermSize{Rows: 24, Cols: 80}, "sh", "-i")
	// The sandbox's terminals are its own: a devpts instance whose first
	// terminal is 0 and which holds nothing of the host's.
	tm.command("echo T=$(tty) L=$(ls /dev/pts | tr '\\n' ,) E=$TERM")
	tm.expect("T=/dev/pts/0 L=0,ptmx, E=xterm-256color\r\n")
	// The command can reopen its terminal by name and through /dev/tty,
	// and set its modes there.
	tm.command("stty -F /dev/tty cols 99 && stty size </dev/pts/0 && echo reopened")
	tm.expect("24 99\r\nreopened\r\n")
	tm.command("exit")
	if res := tm.wait(); res.ExitCode != 0 || res.Reason != sandbox.ReasonExit {
		t.Errorf("exit: got %s", describe(res))
	}
	// A command on pipes has no terminal.
	if o := e.sh(t, "tty"); o.res.ExitCode == 0 || !strings.Contains(o.stdout, "not a tty") {
		t.Errorf("tty on pipes: want \"not a tty\" and a failure, got %s", o)
	}
}

func testPTYOutputLimit(t *testing.T, e *env) {
	var out syncBuffer
	size := sandbox.TermSize{Rows: 24, Cols: 80}
	req := e.w.Flood(false)
	req.PTY, req.Stdout = &size, &out
	res, err := sandbox.Run(e.ctx, e.sb, req)
	if err != nil {
		t.Fatalf("a flood on a terminal: %v", err)
	}
	if res.Reason != sandbox.ReasonOutputLimit || !res.StdoutTruncated || !res.Hit(sandbox.LimitOutput) {
		t.Errorf("a flood on a terminal: want reason output_limit, stdout truncated and the output limit hit; got %s", describe(res))
	}
	if n := int64(out.Len()); n != e.spec.Limits.OutputBytes {
		t.Errorf("a flood on a terminal: %d bytes of output came through, want exactly the limit, %d", n, e.spec.Limits.OutputBytes)
	}
}

func testPTYTimeout(t *testing.T, e *env) {
	size := sandbox.TermSize{Rows: 24, Cols: 80}
	start := time.Now()
	req := e.w.Sleep(30 * time.Second)
	req.PTY, req.Timeout = &size, time.Second
	res, err := sandbox.Run(e.ctx, e.sb, req)
	if err != nil {
		t.Fatalf("a sleep on a terminal: %v", err)
	}
	if res.Reason != sandbox.ReasonTimeout || !res.Hit(sandbox.LimitTimeout) {
		t.Errorf("a 30 s sleep on a terminal with a 1 s timeout: want reason timeout, got %s", describe(res))
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("the 1 s timeout ended the command only after %v", d)
	}
}

func testPTYTree(t *testing.T, e *env) {
	size := sandbox.TermSize{Rows: 24, Cols: 80}
	// The heartbeat's child writes while its main process waits; the main
	// process is killed by the timeout, which must take the child too.
	req := e.w.Heartbeat("/tmp/hb-pty")
	req.PTY, req.Timeout = &size, 2*time.Second
	p, err := e.sb.Start(e.ctx, req)
	if err != nil {
		t.Fatalf("start a heartbeat on a terminal: %v", err)
	}
	e.waitBeating(t, "/tmp/hb-pty")
	if res, err := p.Wait(e.ctx); err != nil || res.Reason != sandbox.ReasonTimeout {
		t.Fatalf("the heartbeat on a terminal: %v, %s", err, describe(res))
	}
	if e.beating(t, "/tmp/hb-pty") {
		t.Errorf("a child of a command on a terminal survived its end")
	}
}

func testResizeWithoutPTY(t *testing.T, e *env) {
	p, err := e.sb.Start(e.ctx, e.w.Sleep(5*time.Second))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() { _ = p.Signal(context.Background(), syscall.SIGKILL) }()
	rz, ok := p.(sandbox.Resizer)
	if !ok {
		t.Fatalf("a process of a driver with terminals (%T) is not a sandbox.Resizer", p)
	}
	if err := rz.Resize(e.ctx, sandbox.TermSize{Rows: 24, Cols: 80}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("resize of a command on pipes: got %v, want an error wrapping ErrInvalid", err)
	}
}
