package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

// hostTerm is airlock running on a terminal of the test's: the test is the
// person at its keyboard.
type hostTerm struct {
	t      *testing.T
	master *os.File
	slave  *os.File // kept open: its modes are read after airlock exits
	before unix.Termios
	cmd    *exec.Cmd

	mu     sync.Mutex
	screen []byte
	seen   int
	done   chan struct{}
	code   int
}

// onTerminal starts airlock with inv on a new terminal of the host, of
// rows x cols, as the controlling process of its own session.
func onTerminal(t *testing.T, inv invocation, rows, cols uint16) *hostTerm {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open a terminal on the host: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(sfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	h := &hostTerm{t: t, master: os.NewFile(uintptr(mfd), "ptmx"), slave: os.NewFile(uintptr(sfd), "pts"), done: make(chan struct{})}
	before, err := unix.IoctlGetTermios(sfd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	h.before = *before
	h.cmd = airlockCmd(context.Background(), inv)
	h.cmd.Env = append(h.cmd.Env, "TERM=xterm-256color")
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = h.slave, h.slave, h.slave
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := h.master.Read(buf)
			h.mu.Lock()
			h.screen = append(h.screen, buf[:n]...)
			h.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		err := h.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			h.code = ee.ExitCode()
		}
		close(h.done)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.done
		h.master.Close()
		h.slave.Close()
	})
	return h
}

func (h *hostTerm) typeIn(s string) {
	h.t.Helper()
	if _, err := h.master.WriteString(s); err != nil {
		h.t.Fatalf("type %q: %v", s, err)
	}
}

func (h *hostTerm) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.screen)
}

func (h *hostTerm) expect(want string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := h.text()
		if i := strings.Index(s[h.seen:], want); i >= 0 {
			h.seen += i + len(want)
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the terminal did not show %q within 20 s; it showed %q", want, s[h.seen:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// started waits until airlock's runtime handles SIGQUIT, and a moment
// more for it to reach its command.
func (h *hostTerm) started() {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(h.cmd.Process.Pid) + "/status")
		if err != nil {
			break
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "SigCgt:\t"); ok {
				if n, err := strconv.ParseUint(v, 16, 64); err == nil && n&(1<<(int(syscall.SIGQUIT)-1)) != 0 {
					time.Sleep(100 * time.Millisecond)
					return
				}
			}
		}
	}
	h.t.Fatal("airlock did not start handling signals")
}

// exit waits for airlock to exit and returns its code.
func (h *hostTerm) exit() int {
	h.t.Helper()
	select {
	case <-h.done:
	case <-time.After(20 * time.Second):
		h.t.Fatalf("airlock did not exit within 20 s; the terminal showed %q", h.text())
	}
	return h.code
}

// restored checks that the terminal's modes are those it had before
// airlock ran, and that airlock's last words to it reset the screen.
func (h *hostTerm) restored() {
	h.t.Helper()
	now, err := unix.IoctlGetTermios(int(h.slave.Fd()), unix.TCGETS)
	if err != nil {
		h.t.Fatal(err)
	}
	if now.Iflag != h.before.Iflag || now.Oflag != h.before.Oflag || now.Lflag != h.before.Lflag || now.Cflag != h.before.Cflag || now.Cc != h.before.Cc {
		h.t.Errorf("the terminal's modes were not restored: before %+v, after %+v", h.before, *now)
	}
	// The last bytes reach the master after a moment.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(h.text(), tty.Reset); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Errorf("airlock did not reset the terminal; it showed %q", h.text())
			break
		}
	}
}

// TestSandboxExecTerminal is `airlock sandbox exec -t` as a person uses
// it: a Python REPL and a shell typed into from a real terminal, resized,
// interrupted, left, and a hostile program's escape sequences.
// On gVisor too, where runsc runs here.
func TestSandboxExecTerminal(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	key := newKey(t, dir, "agent")
	cfg := dir + "/airlock.toml"
	if err := os.WriteFile(cfg, []byte("[[template]]\nname = \"default\"\n[[template]]\nname = \"gvisor\"\ndriver = \"gvisor\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "--config", cfg)
	env := []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + key}
	sandboxOf := func(t *testing.T, template string) string {
		o := airlockRun(t, invocation{args: []string{"sandbox", "create", "--ttl", "3m", "--template", template}, env: env})
		if o.code != 0 {
			t.Fatalf("sandbox create: %d %q", o.code, o.stderr)
		}
		return strings.TrimSpace(o.stdout)
	}
	id := sandboxOf(t, "default")
	t.Run("native", func(t *testing.T) { terminalSessions(t, d.url, key, env, id) })
	t.Run("gvisor", func(t *testing.T) {
		testcap.Require(t, "runsc")
		terminalSessions(t, d.url, key, env, sandboxOf(t, "gvisor"))
	})
	execT := func(argv ...string) invocation {
		return invocation{args: append([]string{"sandbox", "exec", "-t", id, "--"}, argv...), env: env}
	}

	t.Run("piped input", func(t *testing.T) {
		// Without a terminal of its own, airlock still gives the command
		// one; what is piped in is typed into it.
		inv := execT("sh")
		inv.stdin = strings.NewReader("echo piped-$((1+2))\nexit 2\n")
		o := airlockRun(t, inv)
		if o.code != 2 || !strings.Contains(o.stdout, "piped-3") {
			t.Errorf("piped into -t: %d %q %q", o.code, o.stdout, o.stderr)
		}
		// The end of the input is the end of the shell's.
		inv.stdin = strings.NewReader("echo no-exit\n")
		o = airlockRun(t, inv)
		if o.code != 0 || !strings.Contains(o.stdout, "no-exit") {
			t.Errorf("piped into -t without exit: %d %q %q", o.code, o.stdout, o.stderr)
		}
	})

	t.Run("lost connection", func(t *testing.T) {
		dir2 := t.TempDir()
		key2 := newKey(t, dir2, "agent")
		d2 := startDaemon(t, dir2)
		env2 := []string{"AIRLOCK_URL=" + d2.url, "AIRLOCK_API_KEY=" + key2}
		o := airlockRun(t, invocation{args: []string{"sandbox", "create"}, env: env2})
		id2 := strings.TrimSpace(o.stdout)
		h := onTerminal(t, invocation{args: []string{"sandbox", "exec", "-t", id2, "--", "sh", "-c", "echo ready; sleep 100"}, env: env2}, 24, 80)
		h.expect("ready")
		_ = d2.cmd.Process.Kill()
		if code := h.exit(); code != cli.ExitAirlock {
			t.Errorf("the daemon died: airlock exited %d; the terminal showed %q", code, h.text())
		}
		h.restored()
	})
}

// terminalSessions are the sessions of `airlock sandbox exec -t` in
// sandbox id of the daemon at url.
func terminalSessions(t *testing.T, url, key string, env []string, id string) {
	execT := func(argv ...string) invocation {
		return invocation{args: append([]string{"sandbox", "exec", "-t", id, "--"}, argv...), env: env}
	}
	t.Run("python", func(t *testing.T) {
		h := onTerminal(t, execT("python3", "-i", "-q"), 30, 100)
		h.expect(">>> ")
		// Enter sends CR, as a keyboard does; the raw mode passes it on.
		h.typeIn("1+1\r")
		h.expect("1+1\r\n2\r\n>>> ")
		h.typeIn("import os; os.get_terminal_size()\r")
		h.expect("os.terminal_size(columns=100, lines=30)")
		if err := unix.IoctlSetWinsize(int(h.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 120}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // SIGWINCH, then the resize through the daemon
		h.typeIn("os.get_terminal_size()\r")
		h.expect("os.terminal_size(columns=120, lines=40)")
		h.typeIn("import time; time.sleep(30)\r")
		h.expect("time.sleep(30)\r\n")
		time.Sleep(300 * time.Millisecond)
		h.typeIn("\x03") // Ctrl-C reaches python, not airlock
		h.expect("KeyboardInterrupt")
		h.typeIn("print('alive', 6*7)\r")
		h.expect("alive 42\r\n")
		h.typeIn("exit(3)\r")
		if code := h.exit(); code != 3 {
			t.Errorf("airlock exited %d after exit(3); the terminal showed %q", code, h.text())
		}
		h.restored()
	})

	t.Run("shell", func(t *testing.T) {
		h := onTerminal(t, execT("sh", "-i"), 24, 80)
		h.expect("$ ")
		h.typeIn("echo $TERM; tty; stty size\r")
		h.expect("xterm-256color\r\n/dev/pts/")
		h.expect("\r\n24 80\r\n")
		h.typeIn("exit 4\r")
		if code := h.exit(); code != 4 {
			t.Errorf("exit 4: airlock exited %d", code)
		}
		h.restored()
	})

	t.Run("bash", func(t *testing.T) {
		// A usable shell: line editing, history, Ctrl-C at the prompt.
		inv := invocation{args: []string{"sandbox", "exec", "-t", "-e", "PS1=b$ ", id, "--", "bash", "--norc", "--noprofile", "-i"}, env: env}
		h := onTerminal(t, inv, 24, 80)
		h.expect("b$ ")
		// (bash switches bracketed paste off before running a line: the
		// output follows "\x1b[?2004l\r".)
		h.typeIn("echo abd\x7fc\r") // a typo, Backspace, the fix
		h.expect("\rabc\r\n")
		h.expect("b$ ")
		h.typeIn("\x1b[A") // Up: the last line again
		h.expect("echo abc")
		h.typeIn("\r")
		h.expect("\rabc\r\n")
		h.expect("b$ ")
		// Ctrl-C drops the line being edited (once it is echoed: gVisor's
		// line discipline, unlike Linux's, keeps input not yet read).
		h.typeIn("half a line")
		h.expect("half a line")
		h.typeIn("\x03")
		h.expect("b$ ")
		h.typeIn("echo $((6*7)) $0\r")
		h.expect("42 bash\r\n")
		h.typeIn("exit 5\r")
		if code := h.exit(); code != 5 {
			t.Errorf("exit 5: airlock exited %d; the terminal showed %q", code, h.text())
		}
		h.restored()
	})

	t.Run("attach", func(t *testing.T) {
		c, err := client.New(url, key)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		p, err := c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sh", "-i"}, Env: map[string]string{"PS1": "at$ "}, PTY: &client.TermSize{Rows: 24, Cols: 80}}})
		if err != nil {
			t.Fatal(err)
		}
		attachTo := invocation{args: []string{"sandbox", "attach", id, p.ID}, env: env}
		h := onTerminal(t, attachTo, 30, 90)
		h.expect("at$ ") // replayed from what the daemon kept
		h.typeIn("echo attached-$((1+1)); stty size\r")
		h.expect("attached-2\r\n30 90\r\n")
		h.typeIn("\x1c")
		if code := h.exit(); code != 0 {
			t.Errorf("detaching: airlock exited %d; the terminal showed %q", code, h.text())
		}
		h.restored()
		h.expect("detached")
		if w, err := c.WaitProcess(ctx, id, p.ID, 100*time.Millisecond); err != nil || !w.Running {
			t.Fatalf("after detaching the shell no longer runs: %+v %v", w, err)
		}
		h = onTerminal(t, attachTo, 24, 80)
		h.expect("attached-2") // the ring again
		h.typeIn("exit 6\r")
		if code := h.exit(); code != 6 {
			t.Errorf("exit 6 in an attached shell: airlock exited %d; the terminal showed %q", code, h.text())
		}
		h.restored()

		// A process on pipes: its output, then its code.
		q, err := c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sh", "-c", "echo one; echo two >&2; sleep 0.5; exit 3"}}})
		if err != nil {
			t.Fatal(err)
		}
		o := airlockRun(t, invocation{args: []string{"sandbox", "attach", id, q.ID}, env: env})
		if o.code != 3 || o.stdout != "one\n" || o.stderr != "two\n" {
			t.Errorf("attach to a process on pipes: %d %q %q", o.code, o.stdout, o.stderr)
		}
		// Followed from a terminal, a process on pipes has its escapes
		// shown, not obeyed (security review 2, N4); joined to its own
		// terminal (above) a program draws as it likes.
		q, err = c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sh", "-c", `printf 'x\033]0;pwned\007\033[2Ky\n'; sleep 0.3`}}})
		if err != nil {
			t.Fatal(err)
		}
		h = onTerminal(t, invocation{args: []string{"sandbox", "attach", id, q.ID}, env: env}, 24, 80)
		h.expect("x⟨U+001B⟩]0;pwned⟨U+0007⟩⟨U+001B⟩[2Ky")
		if code := h.exit(); code != 0 {
			t.Errorf("attach to a printf: airlock exited %d; the terminal showed %q", code, h.text())
		}
	})

	t.Run("hostile escapes", func(t *testing.T) {
		// The program switches on everything it can in its terminal, which
		// shows on the caller's, then dies without switching it off.
		hostile := `printf '\033[?1049h\033[?25l\033]0;pwned\007\033[?1000h\033[?2004h\033[?1h\033=\033[31m'; stty raw -echo; kill -9 $$`
		h := onTerminal(t, execT("sh", "-c", hostile), 24, 80)
		if code := h.exit(); code != 137 {
			t.Errorf("a program killed by SIGKILL: airlock exited %d", code)
		}
		h.restored()
		s := h.text()
		if i, j := strings.Index(s, "\x1b[?1049h"), strings.LastIndex(s, tty.Reset); i < 0 || j < i {
			t.Errorf("the reset does not come after the program's sequences: %q", s)
		}
	})

	t.Run("leave", func(t *testing.T) {
		h := onTerminal(t, execT("sh", "-c", "echo ready; exec sleep 100"), 24, 80)
		h.expect("ready")
		start := time.Now()
		h.typeIn("\x1c") // Ctrl-\
		if code := h.exit(); code != 137 {
			t.Errorf("Ctrl-\\: airlock exited %d; the terminal showed %q", code, h.text())
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("leaving took %v", d)
		}
		h.restored()
		h.expect("the command was killed")
		c, err := client.New(url, key)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := c.ListProcesses(context.Background(), id)
		if err != nil || len(ps) == 0 {
			t.Fatalf("list: %v", err)
		}
		last := ps[len(ps)-1]
		w, err := c.WaitProcess(context.Background(), id, last.ID, 10*time.Second)
		if err != nil || w.Running || w.Result.Reason != "killed" {
			t.Errorf("the command left with Ctrl-\\: %+v %v", w, err)
		}
	})

}

// TestRunTerminal is `airlock run -t`: a one-shot command on a terminal,
// on every driver.
func TestRunTerminal(t *testing.T) {
	requireE2E(t)
	t.Run("native", func(t *testing.T) { runTerminalSession(t, "native") })
	t.Run("gvisor", func(t *testing.T) {
		testcap.Require(t, "runsc")
		runTerminalSession(t, "gvisor")
	})
}

func runTerminalSession(t *testing.T, driver string) {
	h := onTerminal(t, runArgs("--driver", driver, "-t", "--", "python3", "-i", "-q"), 24, 80)
	h.expect(">>> ")
	h.typeIn("1+1\r")
	h.expect("1+1\r\n2\r\n>>> ")
	h.typeIn("import time; time.sleep(30)\r")
	h.expect("time.sleep(30)\r\n")
	time.Sleep(300 * time.Millisecond)
	h.typeIn("\x03")
	h.expect("KeyboardInterrupt")
	h.typeIn("exit(3)\r")
	if code := h.exit(); code != 3 {
		t.Errorf("exit(3): airlock exited %d; the terminal showed %q", code, h.text())
	}
	h.restored()

	h = onTerminal(t, runArgs("--driver", driver, "-t", "--", "sh", "-c", "echo ready; exec sleep 100"), 24, 80)
	h.expect("ready")
	h.typeIn("\x1c")
	if code := h.exit(); code != 137 {
		t.Errorf("Ctrl-\\: airlock exited %d; the terminal showed %q", code, h.text())
	}
	h.restored()

	// Ctrl-\ while the sandbox is still being made (the terminal is not
	// raw yet: it is SIGQUIT) stops airlock cleanly too.
	h = onTerminal(t, runArgs("--driver", driver, "-t", "--", "sleep", "100"), 24, 80)
	h.started()
	h.typeIn("\x1c")
	if code := h.exit(); code != 137 && code != cli.ExitAirlock {
		t.Errorf("Ctrl-\\ at once: airlock exited %d; the terminal showed %q", code, h.text())
	}
	if s := h.text(); strings.Contains(s, "goroutine") {
		t.Errorf("Ctrl-\\ at once: airlock dumped its goroutines: %q", s)
	}
}
