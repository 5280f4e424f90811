package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// poolCases are the host-wide kernel pools a sandbox could drain: each case
// takes all a sandbox can of one, holds it, and checks that the host can
// still get one. They share the host kernel only on the drivers that run on
// it (native, a container engine); gVisor and a virtual machine have kernels
// of their own and pass without trying. They run alone: each counts the
// host's pool before and after, which another case's sandbox would move.
func poolCases() []testCase {
	return []testCase{
		{name: "inotify", alone: true, needs: []need{needShell}, own: true, run: testInotifyPool},
		{name: "aio", alone: true, needs: []need{needShell}, run: testAIOPool},
		{name: "memfd_secret", alone: true, needs: []need{needShell}, run: testMemfdSecret},
		{name: "pty", alone: true, needs: []need{needShell}, run: testPTYPool},
	}
}

// ptyShare is how many of the host kernel's terminals (kernel.pty.nr) a
// sandbox may hold: its devpts instance's bound (64), with room for what
// the host opens meanwhile. Every devpts instance but the host's shares
// kernel.pty.max less kernel.pty.reserve (3,072 by default).
const ptyShare = 128

// testPTYPool: a sandbox that opens every terminal it can holds no more of
// the host kernel's than its share. Where the sandbox has a kernel of its
// own, the host's count does not move at all.
func testPTYPool(t *testing.T, e *env) {
	before, err := hostPTYs()
	if err != nil {
		t.Skipf("the host kernel's terminal count: %v", err)
	}
	program := drainProgram(`
def take():
    try:
        m, s = os.openpty()
    except OSError as err:
        ctypes.set_errno(err.errno)
        return -1
    os.close(s)
    return m
`)
	_, line := e.startDrain(t, e.sb, program)
	after, err := hostPTYs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("terminals opened: %s; the host kernel's count went from %d to %d", line, before, after)
	if after-before > ptyShare {
		t.Errorf("a sandbox holds %d of the host kernel's terminals (%s), more than its share %d", after-before, line, ptyShare)
	}
}

// inotifySandboxes is how many sandboxes take inotify instances at once:
// more than the host's default pool (128) holds at a sandbox's share.
const inotifySandboxes = 5

// drainProgram is a Python program that, after setup, takes what take()
// (which setup defines) returns until it fails, says how many it holds and why it stopped on one line that
// begins with "held", then keeps them until killed.
func drainProgram(setup string) string {
	return `
import ctypes, os, platform, sys, time
libc = ctypes.CDLL(None, use_errno=True)
arm = platform.machine() in ("aarch64", "arm64")
` + setup + `
held, err = [], 0
while len(held) < 100000:
    r = take()
    if r is None or r < 0:
        err = ctypes.get_errno()
        break
    held.append(r)
print("held", len(held), os.strerror(err) if err else "-", flush=True)
time.sleep(60)
`
}

// holder is a drain program running in a sandbox.
type holder struct {
	p   sandbox.Process
	out *syncBuffer
}

// startDrain starts program in sb and waits until it holds what it could
// take; it returns the "held" line.
func (e *env) startDrain(t *testing.T, sb sandbox.Instance, program string) (holder, string) {
	t.Helper()
	h := holder{out: &syncBuffer{}}
	var errb syncBuffer
	var err error
	h.p, err = sb.Start(e.ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", program}, Stdout: h.out, Stderr: &errb, Timeout: 90 * time.Second})
	if err != nil {
		t.Fatalf("start the drain in %s: %v", sb.ID(), err)
	}
	t.Cleanup(func() { h.stop(t) })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if line, _, ok := strings.Cut(h.out.String(), "\n"); ok {
			return h, line
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain in %s said nothing in 30 s; stdout %q, stderr %q", sb.ID(), h.out.String(), errb.String())
		}
	}
}

// stop kills the drain and waits for it.
func (h holder) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h.p.Signal(ctx, syscall.SIGKILL)
	if _, err := h.p.Wait(ctx); err != nil {
		t.Logf("wait for a drain: %v", err)
	}
}

// testInotifyPool: sandboxes that each take every inotify instance they
// can leave every other sandbox, and the host, able to make one. The kernel charges a sandbox's
// instances to the host user that owns its user namespace (root, for the
// native driver), whose pool is 128 by default; several sandboxes at once
// check that the host's pool fits them all.
func testInotifyPool(t *testing.T, e *env) {
	program := drainProgram(`
def take():
    return libc.inotify_init1(0o2000000)  # IN_CLOEXEC
`)
	var lines []string
	for i := range inotifySandboxes {
		sb := e.create(t, e.spec)
		_, line := e.startDrain(t, sb, program)
		lines = append(lines, fmt.Sprintf("sandbox %d: %s", i, line))
		// Each sandbox gets some: none takes a pool another draws on.
		if f := strings.Fields(line); len(f) < 2 || f[1] == "0" {
			t.Errorf("sandbox %d could make no inotify instance while the sandboxes before it held theirs: %s", i, line)
		}
	}
	t.Logf("inotify instances taken: %s", strings.Join(lines, "; "))
	if err := hostInotify(); err != nil {
		t.Errorf("with %d sandboxes holding every inotify instance they could take (%s), the host cannot make one: %v",
			inotifySandboxes, strings.Join(lines, "; "), err)
	}
}

// testAIOPool: a sandbox that takes every Linux AIO event it can leaves the
// host able to set up a context (fs.aio-max-nr is one pool for the whole
// host).
func testAIOPool(t *testing.T, e *env) {
	program := drainProgram(`
nr_setup = 0 if arm else 206
def take():
    ctx = ctypes.c_ulong(0)
    r = libc.syscall(nr_setup, 4096, ctypes.byref(ctx))
    return None if r != 0 else ctx.value
`)
	_, line := e.startDrain(t, e.sb, program)
	t.Logf("AIO contexts of 4096 events taken: %s", line)
	if err := hostAIO(); err != nil {
		t.Errorf("with a sandbox holding every AIO context it could set up (%s), the host cannot set up one: %v", line, err)
	}
}

// testMemfdSecret: memfd_secret is refused inside. Its pages leave the
// kernel's direct map, which the host shares, and nothing a sandbox runs
// needs it.
func testMemfdSecret(t *testing.T, e *env) {
	out := e.pythonOK(t, `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(447, 0)
print("made" if r >= 0 else "refused", os.strerror(ctypes.get_errno()) if r < 0 else r)
`)
	if !strings.HasPrefix(out, "refused") {
		t.Errorf("memfd_secret inside the sandbox: %q, want it refused", strings.TrimSpace(out))
	}
}
