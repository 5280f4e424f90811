package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// execCases: those marked alone assert how soon something happens (a
// stream's first line, a signal's or a cancel's effect, a heartbeat within
// 400 ms, an immediate EOF). env sets a canary in the test process's
// environment while its sandbox is made, but nothing of that environment
// reaches any sandbox (what env checks): it need not be alone.
func execCases() []testCase {
	return []testCase{
		{name: "lifecycle", closes: true, run: testLifecycle},
		{name: "argv_streams_exit", run: testArgvStreamsExit},
		{name: "own_signal", needs: []need{needShell}, run: testOwnSignal},
		{name: "streaming", alone: true, run: testStreaming},
		{name: "stdin", alone: true, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.OutputBytes = 8 << 20 }, run: testStdin},
		{name: "env", spec: envSpec, run: testEnv},
		{name: "cwd", needs: []need{needFiles}, run: testCwd},
		{name: "not_found", run: testNotFound},
		{name: "not_executable", needs: []need{needShell, needFiles}, run: testNotExecutable},
		{name: "concurrent", run: testConcurrent},
		{name: "background", alone: true, needs: []need{needShell, needFiles, needBackground}, run: testBackground},
		{name: "signal_term", alone: true, run: testSignalTerm},
		{name: "signal_kill", alone: true, needs: []need{needShell, needFiles}, run: testSignalKill},
		{name: "cancel_frozen_agent", alone: true, closes: true, needs: []need{needShell, needFiles, needFreeze}, run: testCancelFrozen},
		{name: "unread_stdin", alone: true, needs: []need{needShell, needFiles, needBackground}, run: testUnreadStdin},
		{name: "cancel", alone: true, needs: []need{needFiles}, run: testCancel},
	}
}

func testLifecycle(t *testing.T, e *env) {
	if !sandbox.ValidID(e.sb.ID()) {
		t.Errorf("ID %q is not a valid sandbox id", e.sb.ID())
	}
	if len(e.sb.Layers()) == 0 {
		t.Errorf("Layers is empty: a sandbox must say which isolation layers are in effect")
	}
	if got := e.ok(t, e.w.Print("ok\n", "", 0)); got != "ok\n" {
		t.Errorf("printing ok printed %q", got)
	}
	select {
	case <-e.sb.Done():
		t.Fatalf("Done is closed while the sandbox runs")
	default:
	}
	if err := e.sb.Close(e.ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-e.sb.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("Done is not closed 5 s after Close returned")
	}
	if err := e.sb.Close(e.ctx); err != nil {
		t.Errorf("a second Close: %v (want nil)", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.sb.Close(done); err != nil {
		t.Errorf("Close with a cancelled context: %v (want nil)", err)
	}
	_, err := sandbox.Run(e.ctx, e.sb, e.w.Print("ok\n", "", 0))
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Exec after Close: got %v, want an error wrapping sandbox.ErrClosed", err)
	}
	_, err = e.sb.Start(e.ctx, e.w.Print("ok\n", "", 0))
	if !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("Start after Close: got %v, want an error wrapping sandbox.ErrClosed", err)
	}
	// A driver without the file API has nothing to refuse here; the files
	// group is where it declares that.
	if e.caps.Files {
		if _, err := e.readFile("/etc/passwd"); err == nil {
			t.Errorf("ReadFile after Close succeeded")
		}
	}
}

func testArgvStreamsExit(t *testing.T, e *env) {
	t.Run("argv", func(t *testing.T) {
		// Arguments arrive verbatim: no shell splits, expands or drops them.
		args := []string{"a b", "", "c'd\"e", "$HOME", "*", "ü\tx", "-n"}
		o := e.run(t, e.w.Args(args...))
		expectExit(t, "printing its arguments", o, 0)
		var want strings.Builder
		for _, a := range args {
			fmt.Fprintf(&want, "[%s]", a)
		}
		if o.stdout != want.String() {
			t.Errorf("arguments arrived as %q, want %q", o.stdout, want.String())
		}
	})
	t.Run("streams", func(t *testing.T) {
		o := e.run(t, e.w.Print("to-out\nmore-out\n", "to-err\n", 0))
		expectExit(t, "printing to both streams", o, 0)
		if o.stdout != "to-out\nmore-out\n" || o.stderr != "to-err\n" {
			t.Errorf("stdout %q, stderr %q; want %q and %q", o.stdout, o.stderr, "to-out\nmore-out\n", "to-err\n")
		}
		if len(o.res.LimitsHit) != 0 || o.res.Message != "" {
			t.Errorf("a plain exit reports limits or a message: %s", o)
		}
	})
	t.Run("exit_code", func(t *testing.T) {
		for _, code := range []int{0, 1, 42, 255} {
			o := e.run(t, e.w.Print("", "", code))
			expectExit(t, fmt.Sprintf("exit %d", code), o, code)
		}
	})
}

// testOwnSignal: a command that a signal of its own ends ended by itself.
func testOwnSignal(t *testing.T, e *env) {
	o := e.sh(t, "kill -USR1 $$")
	if o.res.ExitCode != -1 || o.res.Signal != "SIGUSR1" || o.res.Reason != sandbox.ReasonExit {
		t.Errorf("a command that signals itself: want exit -1, signal SIGUSR1, reason exit; got %s", o)
	}
}

// timedWriter records when each write arrived.
type timedWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	firsts []time.Time // arrival of each write
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.firsts = append(w.firsts, time.Now())
	return w.buf.Write(p)
}

func testStreaming(t *testing.T, e *env) {
	for _, stream := range []string{"stdout", "stderr"} {
		t.Run(stream, func(t *testing.T) {
			w := &timedWriter{}
			req := e.w.Trickle(stream == "stderr", "first\n", "second\n", time.Second)
			if stream == "stdout" {
				req.Stdout = w
			} else {
				req.Stderr = w
			}
			o := e.run(t, req)
			end := time.Now()
			expectExit(t, "print, sleep, print", o, 0)
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.buf.String() != "first\nsecond\n" {
				t.Fatalf("%s got %q", stream, w.buf.String())
			}
			if len(w.firsts) == 0 {
				t.Fatalf("the writer was never called")
			}
			if early := end.Sub(w.firsts[0]); early < 700*time.Millisecond {
				t.Errorf("the first line reached the writer only %v before the command ended; want it delivered as it was printed (about 1 s before the end)", early)
			}
		})
	}
}

func testStdin(t *testing.T, e *env) {
	t.Run("large", func(t *testing.T) {
		raw := make([]byte, 1200<<10)
		_, _ = rand.Read(raw)
		in := base64.StdEncoding.EncodeToString(raw) // > 1.5 MiB of text
		req := e.w.Cat()
		req.Stdin = strings.NewReader(in)
		o := e.run(t, req)
		expectExit(t, "cat of a large stdin", o, 0)
		if o.stdout != in {
			t.Errorf("%d bytes went in through cat, %d came out, equal: %v", len(in), len(o.stdout), o.stdout == in)
		}
	})
	t.Run("binary", func(t *testing.T) {
		in := string([]byte{0, 1, 2, 255, '\n', 0, 'x'})
		req := e.w.Hex()
		req.Stdin = strings.NewReader(in)
		o := e.run(t, req)
		expectExit(t, "hex of binary stdin", o, 0)
		if got := strings.Join(strings.Fields(o.stdout), " "); got != "00 01 02 ff 0a 00 78" {
			t.Errorf("binary stdin arrived as %q", got)
		}
	})
	t.Run("none_is_eof", func(t *testing.T) {
		start := time.Now()
		o := e.run(t, e.w.Cat())
		expectExit(t, "cat without stdin", o, 0)
		if o.stdout != "" {
			t.Errorf("cat without stdin printed %q", o.stdout)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("cat without stdin took %v: no stdin must be an immediate EOF", d)
		}
	})
}

// canaryEnv is set in the test process while the sandbox is made; nothing
// of it may reach the sandbox.
const canaryEnv = "AIRLOCK_SANDBOXTEST_CANARY"

func envSpec(t *testing.T, s *sandbox.Spec) {
	t.Setenv(canaryEnv, "leaked-"+randomToken(""))
	s.Env = []string{"SPEC_VAR=from-spec"}
}

func testEnv(t *testing.T, e *env) {
	canary := canaryValueFromProcess(t)
	t.Run("defaults", func(t *testing.T) {
		env := envLines(t, e, nil)
		for _, want := range []string{"PATH=" + sandbox.DefaultPath, "HOME=" + sandbox.Workspace, "LANG=C.UTF-8", "SPEC_VAR=from-spec"} {
			if !slices.Contains(env, want) {
				t.Errorf("default environment lacks %s: %q", want, env)
			}
		}
	})
	t.Run("request_replaces", func(t *testing.T) {
		// ExecRequest.Env adds to the defaults and replaces what it names.
		req := []string{"PATH=/usr/bin:/bin", "FOO=bar baz", "HOME=/tmp"}
		env := envLines(t, e, req)
		for _, kv := range req {
			if !slices.Contains(env, kv) {
				t.Errorf("with Env %q the command's environment %q lacks %q", req, env, kv)
			}
		}
		for _, kv := range env {
			if strings.HasPrefix(kv, "PATH=") && kv != "PATH=/usr/bin:/bin" || strings.HasPrefix(kv, "HOME=") && kv != "HOME=/tmp" {
				t.Errorf("Env did not replace the default: %q in %q", kv, env)
			}
		}
		if !slices.Contains(env, "LANG=C.UTF-8") {
			t.Errorf("the defaults are gone: %q", env)
		}
	})
	t.Run("nothing_of_the_host", func(t *testing.T) {
		for _, env := range [][]string{nil, {"PATH=/usr/bin:/bin"}} {
			req := e.w.Env()
			req.Env = env
			o := e.run(t, req)
			expectExit(t, "printing the environment", o, 0)
			if strings.Contains(o.stdout, canaryEnv) || strings.Contains(o.stdout, canary) {
				t.Errorf("the test process's environment leaks into the sandbox: %s", clip(o.stdout))
			}
		}
	})
}

func canaryValueFromProcess(t *testing.T) string {
	t.Helper()
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, canaryEnv+"="); ok {
			return v
		}
	}
	t.Fatalf("the canary %s is not set in the test process", canaryEnv)
	return ""
}

// envLines prints the environment with the given request environment and
// returns its lines, sorted.
func envLines(t *testing.T, e *env, reqEnv []string) []string {
	t.Helper()
	req := e.w.Env()
	req.Env = reqEnv
	o := e.run(t, req)
	expectExit(t, "env", o, 0)
	lines := strings.Split(strings.TrimSuffix(o.stdout, "\n"), "\n")
	slices.Sort(lines)
	return lines
}

func testCwd(t *testing.T, e *env) {
	t.Run("default", func(t *testing.T) {
		if got := e.ok(t, e.w.Pwd()); got != sandbox.Workspace+"\n" {
			t.Errorf("default working directory %q, want %s", got, sandbox.Workspace)
		}
	})
	t.Run("dir", func(t *testing.T) {
		if err := e.sb.Files().Mkdir(e.ctx, "/workspace/sub/dir", 0o755); err != nil {
			t.Fatalf("Mkdir: %v", err)
		}
		for _, dir := range []string{"/tmp", "/workspace/sub/dir", "/"} {
			req := e.w.Pwd()
			req.Dir = dir
			o := e.run(t, req)
			expectExit(t, "pwd in "+dir, o, 0)
			if o.stdout != dir+"\n" {
				t.Errorf("Dir %s: pwd printed %q", dir, o.stdout)
			}
		}
	})
	t.Run("missing", func(t *testing.T) {
		req := e.w.Print("ran\n", "", 0)
		req.Dir = "/workspace/does-not-exist"
		o := e.run(t, req)
		if o.res.ExitCode != 126 || o.stdout != "" {
			t.Errorf("a missing working directory: want exit code 126 and nothing run, got %s", o)
		}
		if o.res.Message == "" {
			t.Errorf("a missing working directory gives no message: %s", o)
		}
	})
}

func testNotFound(t *testing.T, e *env) {
	for _, argv0 := range []string{"no-such-command-xyz", "/workspace/no-such-file", "/usr/bin/no-such-file"} {
		o := e.run(t, sandbox.ExecRequest{Argv: []string{argv0, "arg"}})
		if o.res.ExitCode != 127 || o.res.Reason != sandbox.ReasonExit {
			t.Errorf("%s: want exit code 127 (not found), reason exit; got %s", argv0, o)
		}
		if o.res.Message == "" {
			t.Errorf("%s: a command that is not found gives no message", argv0)
		}
	}
}

func testNotExecutable(t *testing.T, e *env) {
	e.writeFile(t, "/workspace/script.sh", "#!/bin/sh\necho ran\n", 0o644)
	e.shOK(t, "mkdir -p /workspace/adir")
	for _, argv0 := range []string{"/workspace/script.sh", "/workspace/adir", "/etc/passwd"} {
		o := e.run(t, sandbox.ExecRequest{Argv: []string{argv0}})
		if o.res.ExitCode != 126 || o.res.Reason != sandbox.ReasonExit || o.stdout != "" {
			t.Errorf("%s: want exit code 126 (not executable), reason exit; got %s", argv0, o)
		}
	}
	// With the execute bit it runs: the 126 above was about the mode.
	e.shOK(t, "chmod +x /workspace/script.sh")
	o := e.run(t, sandbox.ExecRequest{Argv: []string{"/workspace/script.sh"}})
	expectExit(t, "the script once executable", o, 0)
	if o.stdout != "ran\n" {
		t.Errorf("the executable script printed %q", o.stdout)
	}
}

func testConcurrent(t *testing.T, e *env) {
	const n, lines = 10, 300
	outs := make([]output, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var out, errb syncBuffer
			req := e.w.Lines(lines, fmt.Sprintf("exec-%d-line-", i), fmt.Sprintf("err-%d-", i), i)
			req.Stdout, req.Stderr = &out, &errb
			res, err := sandbox.Run(e.ctx, e.sb, req)
			outs[i], errs[i] = output{stdout: out.String(), stderr: errb.String(), res: res}, err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("exec %d: %v", i, errs[i])
			continue
		}
		var wantOut, wantErr strings.Builder
		for j := range lines {
			fmt.Fprintf(&wantOut, "exec-%d-line-%d\n", i, j)
			fmt.Fprintf(&wantErr, "err-%d-%d\n", i, j)
		}
		expectExit(t, fmt.Sprintf("concurrent exec %d", i), outs[i], i)
		if outs[i].stdout != wantOut.String() || outs[i].stderr != wantErr.String() {
			t.Errorf("concurrent exec %d: output is not intact and separate:\nstdout %s\nstderr %s", i, clip(outs[i].stdout), clip(outs[i].stderr))
		}
	}
}

func testBackground(t *testing.T, e *env) {
	t.Run("survivor", func(t *testing.T) {
		p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
			Argv:       []string{"sh", "-c", "sleep 37 & (" + heartbeat("/tmp/hb-bg") + ") >/dev/null 2>&1 & echo started"},
			Background: true,
		})
		if err != nil {
			t.Fatalf("start a background exec: %v", err)
		}
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		res, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("wait for the background exec's main process: %v", err)
		}
		if res.ExitCode != 0 || res.Reason != sandbox.ReasonExit {
			t.Errorf("background exec's main process: want exit 0, got %s", describe(res))
		}
		if !e.beating(t, "/tmp/hb-bg") {
			t.Errorf("the background exec's processes did not survive its main process")
		}
		if ps := e.shOK(t, "ps -eo args"); !strings.Contains(ps, "sleep 37") {
			t.Errorf("a later exec's ps does not show the background exec's sleep 37:\n%s", ps)
		}
	})
	t.Run("killed_by_later_exec", func(t *testing.T) {
		// What one exec left running, a later one can manage: find it in
		// /proc and stop it.
		_, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
			Argv:       []string{"sh", "-c", "echo $$ > /tmp/bg.pid; exec sh -c '" + heartbeat("/tmp/hb-kill") + "'"},
			Background: true,
		})
		if err != nil {
			t.Fatalf("start a background exec: %v", err)
		}
		e.waitBeating(t, "/tmp/hb-kill")
		o := e.sh(t, "p=$(cat /tmp/bg.pid); test -d /proc/$p && echo visible; kill $p")
		expectExit(t, "kill a background process from a later exec", o, 0)
		if o.stdout != "visible\n" {
			t.Errorf("a later exec does not see the background process in /proc: %s", o)
		}
		if e.beating(t, "/tmp/hb-kill") {
			t.Errorf("a later exec could not stop the background process")
		}
	})
	t.Run("foreground_owns_its_tree", func(t *testing.T) {
		e.shOK(t, "("+heartbeat("/tmp/hb-fg")+") >/dev/null 2>&1 & echo started")
		if e.beating(t, "/tmp/hb-fg") {
			t.Errorf("a foreground exec's child survived its end")
		}
	})
	t.Run("no_output_limit", func(t *testing.T) {
		// A background process (a server, a watcher) prints as long as it
		// runs: the output limit is the foreground's, and its reader keeps
		// what it wants of it.
		n := 3*e.spec.Limits.WithDefaults().OutputBytes + 12345
		var out countWriter
		p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
			Argv:       []string{"head", "-c", strconv.FormatInt(n, 10), "/dev/zero"},
			Background: true, Stdout: &out,
		})
		if err != nil {
			t.Fatalf("start a background exec: %v", err)
		}
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		res, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		if res.ExitCode != 0 || res.Reason != sandbox.ReasonExit || res.StdoutTruncated || res.Hit(sandbox.LimitOutput) {
			t.Errorf("a background exec printing %d bytes, past the output limit: want exit 0, untruncated; got %s", n, describe(res))
		}
		if got := out.n.Load(); got != n {
			t.Errorf("a background exec printed %d bytes; %d came through", n, got)
		}
	})
	t.Run("server", func(t *testing.T) {
		if err := e.sb.Files().Mkdir(e.ctx, "/workspace/www", 0o755); err != nil {
			t.Fatalf("Mkdir: %v", err)
		}
		e.writeFile(t, "/workspace/www/hello.txt", "hello from the background\n", 0o644)
		_, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
			Argv:       []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/www"},
			Background: true,
		})
		if err != nil {
			t.Fatalf("start a background server: %v", err)
		}
		// The case is about a background server answering later execs,
		// not about how fast Python starts: under an emulated CPU (a
		// microVM without KVM) two interpreters starting side by side take
		// seconds, so this exec has a timeout of its own.
		o := e.run(t, sandbox.ExecRequest{Argv: []string{"python3", "-c", `
import time, urllib.request
deadline = time.monotonic() + 25
while True:
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8000/hello.txt", timeout=2).read().decode(), end="")
        break
    except OSError:
        if time.monotonic() > deadline:
            raise SystemExit("the background server never answered")
        time.sleep(0.05)
`}, Timeout: 30 * time.Second})
		expectExit(t, "fetch from the background server", o, 0)
		if got := o.stdout; got != "hello from the background\n" {
			t.Errorf("a later exec fetched %q from the background server", got)
		}
		if ps := e.shOK(t, "ps -eo args"); !strings.Contains(ps, "http.server") {
			t.Errorf("a later exec's ps does not show the background server:\n%s", ps)
		}
	})
}

// heartbeat is a shell loop that appends to file every 50 ms, forever: a
// process whose life a test can watch without seeing it.
func heartbeat(file string) string {
	return "while :; do echo x >> " + file + "; sleep 0.05; done"
}

// beating reports whether file grows within 400 ms.
func (e *env) beating(t *testing.T, file string) bool {
	t.Helper()
	size := func() int64 {
		fi, err := e.sb.Files().Stat(e.ctx, file)
		if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("Stat %s: %v", file, err)
		}
		return fi.Size
	}
	before := size()
	time.Sleep(400 * time.Millisecond)
	return size() > before
}

// waitBeating waits until file grows: the process writing it runs.
func (e *env) waitBeating(t *testing.T, file string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if e.beating(t, file) {
			return
		}
	}
	t.Fatalf("%s never started growing", file)
}

// running reports whether p has not ended yet, as far as Wait can tell.
func running(ctx context.Context, p sandbox.Process) bool {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := p.Wait(ctx)
	return errors.Is(err, context.DeadlineExceeded)
}

func testSignalTerm(t *testing.T, e *env) {
	p, err := e.sb.Start(e.ctx, e.w.Sleep(30*time.Second))
	if err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	// Cancelling Wait's context stops the waiting, not the command.
	short, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	_, err = p.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with an expiring context returned %v, want context.DeadlineExceeded", err)
	}
	if !running(e.ctx, p) {
		t.Errorf("the command ended when a Wait's context did")
	}
	start := time.Now()
	if err := p.Signal(e.ctx, syscall.SIGTERM); err != nil {
		t.Fatalf("send SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait after SIGTERM: %v", err)
	}
	// SIGTERM is the command's own business: it ended by a signal. Reason
	// exit and killed both describe that.
	if res.Signal != "SIGTERM" || res.ExitCode != -1 || (res.Reason != sandbox.ReasonExit && res.Reason != sandbox.ReasonKilled) || len(res.LimitsHit) != 0 {
		t.Errorf("after SIGTERM: want signal SIGTERM, exit -1, reason exit or killed, no limits; got %s", describe(res))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("sleep took %v to end after SIGTERM", d)
	}
	if err := p.Signal(e.ctx, syscall.SIGTERM); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("signalling an ended exec: %v (want nil or ErrNotFound)", err)
	}
}

func testSignalKill(t *testing.T, e *env) {
	script := "(" + heartbeat("/tmp/hb-child") + ") & setsid sh -c '" + heartbeat("/tmp/hb-setsid") + "' & trap '' TERM HUP; sleep 34"
	p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	e.waitBeating(t, "/tmp/hb-setsid")
	start := time.Now()
	if err := p.Signal(e.ctx, syscall.SIGKILL); err != nil {
		t.Fatalf("send SIGKILL: %v", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait after SIGKILL: %v", err)
	}
	if res.Reason != sandbox.ReasonKilled || res.Signal != "SIGKILL" || res.ExitCode != -1 {
		t.Errorf("after SIGKILL: want reason killed, signal SIGKILL, exit -1; got %s", describe(res))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the exec took %v to end after SIGKILL", d)
	}
	for _, hb := range []string{"/tmp/hb-child", "/tmp/hb-setsid"} {
		if e.beating(t, hb) {
			t.Errorf("SIGKILL left a process of the exec running (%s still grows)", hb)
		}
	}
}

func testCancel(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := sandbox.Run(ctx, e.sb, e.w.Heartbeat("/tmp/hb-cancel"))
	d := time.Since(start)
	if err != nil {
		t.Fatalf("Exec whose context was cancelled returned an error instead of a result: %v", err)
	}
	if res.Reason != sandbox.ReasonKilled || res.ExitCode != -1 || res.Signal != "SIGKILL" {
		t.Errorf("cancelled Exec: want reason killed, signal SIGKILL, exit -1; got %s", describe(res))
	}
	if d > 2*time.Second {
		t.Errorf("cancelled Exec returned after %v; want soon after the cancel (300 ms)", d)
	}
	if e.beating(t, "/tmp/hb-cancel") {
		t.Errorf("the cancelled exec's processes are still running")
	}
}

// testCancelFrozen: with the sandbox's agent frozen (it answers nothing), a
// cancelled exec still returns within a second, as killed, and Close still
// removes everything (the leak check runs after).
func testCancelFrozen(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	type ran struct {
		res sandbox.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := sandbox.Run(ctx, e.sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", heartbeat("/tmp/hb-frozen")}, Timeout: 30 * time.Second})
		done <- ran{res, err}
	}()
	e.waitBeating(t, "/tmp/hb-frozen")
	thaw := e.opts.FreezeAgent(t, e.sb)
	defer thaw()
	start := time.Now()
	cancel()
	select {
	case r := <-done:
		if d := time.Since(start); d > time.Second {
			t.Errorf("the cancelled exec returned %v after the cancel; want within 1 s", d)
		}
		if r.res.Reason != sandbox.ReasonKilled {
			t.Errorf("the cancelled exec: want reason killed, got %s (err %v)", describe(r.res), r.err)
		}
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			t.Errorf("the cancelled exec failed with %v; want a result, or an error that says it was cancelled", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled exec did not return within 5 s while the agent was frozen")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer ccancel()
	if err := e.sb.Close(cctx); err != nil {
		t.Errorf("close with the agent frozen: %v", err)
	}
	select {
	case <-e.sb.Done():
	default:
		t.Error("Done is not closed after Close with the agent frozen")
	}
}

// testUnreadStdin: stdin sent to a command that never reads it cannot make
// the sandbox uncontrollable: execs, file calls and signals still answer
// at once, and once it is killed a new exec runs within a second.
func testUnreadStdin(t *testing.T, e *env) {
	p, err := e.sb.Start(e.ctx, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", "touch /tmp/unread-started; exec sleep 600"}, Background: true,
		Stdin: io.LimitReader(zeros{}, 8<<20),
	})
	if err != nil {
		t.Fatalf("start a command that never reads its stdin: %v", err)
	}
	e.waitFile(t, "/tmp/unread-started")
	time.Sleep(time.Second)
	e.controlAnswers(t, p)
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// controlAnswers checks that while p holds its streams unread, the sandbox
// still runs an exec, answers file calls and kills p, and that a new exec
// runs within a second after the kill.
func (e *env) controlAnswers(t *testing.T, p sandbox.Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var out syncBuffer
	if res, err := sandbox.Run(ctx, e.sb, sandbox.ExecRequest{Argv: []string{"echo", "ok"}, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
		t.Fatalf("an exec beside the stalled stream: %v, %s, stdout %q (want ok within 10 s)", err, describe(res), out.String())
	}
	if _, err := e.sb.Files().Stat(ctx, "/tmp"); err != nil {
		t.Fatalf("a file call beside the stalled stream: %v", err)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the stalled command: %v", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Reason != sandbox.ReasonKilled {
		t.Fatalf("the stalled command after SIGKILL: %v, %s; want reason killed", err, describe(res))
	}
	start := time.Now()
	if res, err := sandbox.Run(ctx, e.sb, sandbox.ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("a new exec after the kill: %v, %s", err, describe(res))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a new exec after the kill took %v; want under 1 s", d)
	}
}

// waitFile waits until path exists in the sandbox.
func (e *env) waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := e.sb.Files().Stat(e.ctx, path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared in the sandbox", path)
}

// countWriter counts what is written to it.
type countWriter struct{ n atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}
