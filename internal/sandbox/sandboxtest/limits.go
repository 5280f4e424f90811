package sandboxtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// limitCases all run alone: most assert how long a limit took to act, and
// the bombs and floods load the machine for whatever runs beside them.
func limitCases() []testCase {
	return []testCase{
		{name: "memory", alone: true, run: testMemoryBomb},
		{name: "memory_block", alone: true, closes: true, run: testMemoryBlock},
		{name: "fork_bomb", alone: true, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.Pids = 16 }, needs: []need{needShell}, run: testForkBomb},
		{name: "cpu_spin_timeout", alone: true, run: testCPUSpinTimeout},
		{name: "sleep_timeout", alone: true, run: testSleepTimeout},
		{name: "cpu_time", alone: true, run: testCPUTime},
		{name: "setsid_survivor", alone: true, needs: []need{needShell, needFiles}, run: testSetsidSurvivor},
		{name: "output_flood", alone: true, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.OutputBytes = 64 << 10 }, run: testOutputFlood},
		{name: "workspace_full", alone: true, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.DiskBytes = 16 << 20 }, needs: []need{needFiles}, run: func(t *testing.T, e *env) { testFill(t, e, "/workspace") }},
		{name: "tmp_full", alone: true, spec: func(_ *testing.T, s *sandbox.Spec) { s.Limits.TmpBytes = 16 << 20 }, needs: []need{needFiles}, run: func(t *testing.T, e *env) { testFill(t, e, "/tmp") }},
	}
}

func testMemoryBomb(t *testing.T, e *env) {
	// 16 MiB at a time, each written, until the 128 MiB limit kills it.
	// The case is about the kill, not about how fast memory fills: under an
	// emulated CPU (a microVM without KVM) on a loaded host it takes more
	// than the sandbox's 3 s, so the bomb has a timeout of its own.
	req := e.w.Alloc()
	req.Timeout = 20 * time.Second
	o := e.run(t, req)
	expectLimits(t, "memory bomb", o, sandbox.ReasonOOM, sandbox.LimitMemory)
	switch {
	case e.caps.Shell && (o.res.Signal != "SIGKILL" || o.res.ExitCode != -1):
		// A Linux kernel's OOM killer ends the process.
		t.Errorf("memory bomb: want it killed by SIGKILL (exit -1), got %s", o)
	case !e.caps.Shell && o.res.ExitCode == 0:
		// Where memory that cannot grow is an allocation failure the
		// program sees (Wasm), it must not end as if it had succeeded.
		t.Errorf("memory bomb: want it to fail, got %s", o)
	}
	if !strings.Contains(o.res.Message, "memory limit") {
		t.Errorf("memory bomb: the message does not name the memory limit: %s", o)
	}
}

// testMemoryBlock: one allocation three times the memory limit, written
// whole, is the memory limit's doing wherever it fails: killed when its
// pages are charged (a Linux kernel's cgroup), or refused at once (Wasm's
// linear memory). Either way the reason is oom with memory in LimitsHit,
// never a failure the program seems to have had on its own (a microVM's
// guest kernel once refused it as an overcommit, and the result said exit
// 1, MemoryError). Whether the sandbox lives on is not this case's point
// (limits/memory checks it): for one large block the host's OOM killer may
// pick gVisor's kernel, which ends the whole sandbox, as oom all the same.
func testMemoryBlock(t *testing.T, e *env) {
	req := e.w.AllocBlock(3 * e.spec.Limits.MemoryBytes)
	req.Timeout = 20 * time.Second
	o := e.run(t, req)
	expectLimits(t, "one block past the memory limit", o, sandbox.ReasonOOM, sandbox.LimitMemory)
	if o.res.ExitCode == 0 {
		t.Errorf("one block past the memory limit: want it to fail, got %s", o)
	}
	if !strings.Contains(o.res.Message, "memory limit") {
		t.Errorf("one block past the memory limit: the message does not name the memory limit: %s", o)
	}
	e.close(t, e.sb)
}

func testForkBomb(t *testing.T, e *env) {
	t.Run("held", func(t *testing.T) {
		// The bomb forks until the pids limit refuses; the main shell
		// stays to the end (or fails to fork its sleep).
		o := e.run(t, sandbox.ExecRequest{Argv: []string{"sh", "-c", "f(){ f|f& }; f; sleep 10"}, Timeout: 2 * time.Second})
		expectLimits(t, "fork bomb", o, sandbox.ReasonPids, sandbox.LimitPids)
		if o.wall > 6*time.Second {
			t.Errorf("fork bomb with a 2 s timeout took %v", o.wall)
		}
	})
	t.Run("survived", func(t *testing.T) {
		// A program that runs into the process limit, copes, and exits 0:
		// the limit was reached and must be reported all the same.
		o := e.python(t, `
import os, time
children, failed = [], 0
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print("failed", failed)
`)
		expectExit(t, "forking past the limit, then exiting", o, 0)
		if o.stdout == "failed 0\n" {
			t.Fatalf("40 forks under a limit of %d all succeeded", e.spec.Limits.Pids)
		}
		if !o.res.Hit(sandbox.LimitPids) {
			t.Errorf("forks failed on the process limit (%s), but pids is not in LimitsHit: %s", strings.TrimSpace(o.stdout), describe(o.res))
		}
	})
	// The bomb's processes are all gone: there is room for new ones.
	e.shOK(t, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait")
}

func testCPUSpinTimeout(t *testing.T, e *env) {
	req := e.w.Spin()
	req.Timeout = time.Second
	o := e.run(t, req)
	expectLimits(t, "CPU spin past the timeout", o, sandbox.ReasonTimeout, sandbox.LimitTimeout)
	if o.res.Signal != "SIGKILL" || o.res.ExitCode != -1 {
		t.Errorf("CPU spin past the timeout: want SIGKILL, exit -1; got %s", o)
	}
	if o.wall < time.Second || o.wall > 3*time.Second {
		t.Errorf("a 1 s timeout ended the spin after %v", o.wall)
	}
}

func testSleepTimeout(t *testing.T, e *env) {
	req := e.w.Sleep(30 * time.Second)
	req.Timeout = time.Second
	o := e.run(t, req)
	expectLimits(t, "sleep past the timeout", o, sandbox.ReasonTimeout, sandbox.LimitTimeout)
	if o.wall < time.Second || o.wall > 1700*time.Millisecond {
		t.Errorf("a 1 s timeout ended sleep 30 after %v; want close to 1 s", o.wall)
	}
	if o.res.Message == "" {
		t.Errorf("timeout: no message says what happened")
	}
	// The sandbox's own default timeout applies when the request sets none.
	o = e.run(t, e.w.Sleep(30*time.Second))
	expectLimits(t, "sleep past the sandbox's default timeout", o, sandbox.ReasonTimeout, sandbox.LimitTimeout)
	if lim := e.spec.Limits.Timeout; o.wall < lim || o.wall > lim+700*time.Millisecond {
		t.Errorf("the sandbox's %v timeout ended sleep 30 after %v", lim, o.wall)
	}
}

func testCPUTime(t *testing.T, e *env) {
	req := e.w.Spin()
	req.CPUTime, req.Timeout = time.Second, 10*time.Second
	o := e.run(t, req)
	expectLimits(t, "CPU time past its limit", o, sandbox.ReasonCPUTime, sandbox.LimitCPUTime)
	if o.res.Hit(sandbox.LimitTimeout) {
		t.Errorf("the CPU-time limit was reported as a timeout: %s", o)
	}
	if o.wall > 5*time.Second {
		t.Errorf("1 s of CPU time at 1 CPU took %v of wall time to be stopped", o.wall)
	}
	if o.res.Usage.CPUMS != 0 && (o.res.Usage.CPUMS < 900 || o.res.Usage.CPUMS > 3000) {
		t.Errorf("usage says %d ms of CPU for a 1 s CPU-time limit", o.res.Usage.CPUMS)
	}
	// Sleeping uses no CPU: a CPU-time limit alone does not stop it.
	req = e.w.Sleep(1500 * time.Millisecond)
	req.CPUTime = time.Second
	o = e.run(t, req)
	expectExit(t, "sleep 1.5 under a 1 s CPU-time limit", o, 0)
}

func testSetsidSurvivor(t *testing.T, e *env) {
	secs := fmt.Sprint(100000 + rand.IntN(800000)) //nolint:gosec // a name to look for, not a secret
	script := `setsid sh -c "sleep ` + secs + ` & ` + heartbeat("/tmp/hb-survivor") + ` &" ; sleep 100`
	o := e.run(t, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Timeout: time.Second})
	expectLimits(t, "double fork + setsid past the timeout", o, sandbox.ReasonTimeout, sandbox.LimitTimeout)
	if ps := e.shOK(t, "ps -eo args"); strings.Contains(ps, "sleep") {
		t.Errorf("a detached survivor is still running in the sandbox:\n%s", ps)
	}
	if e.beating(t, "/tmp/hb-survivor") {
		t.Errorf("a detached survivor is still running in the sandbox (/tmp/hb-survivor grows)")
	}
	if pids := hostProcesses("sleep\x00" + secs + "\x00"); len(pids) > 0 {
		t.Errorf("the detached survivor still runs on the host: pids %v", pids)
	}
}

// hostProcesses returns the pids of host processes whose command line is
// cmdline (arguments NUL-terminated). It finds nothing where /proc is not.
func hostProcesses(cmdline string) []string {
	ents, _ := os.ReadDir("/proc")
	var pids []string
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && string(b) == cmdline {
			pids = append(pids, ent.Name())
		}
	}
	return pids
}

func testOutputFlood(t *testing.T, e *env) {
	limit := int(e.spec.Limits.OutputBytes)
	for _, stream := range []string{"stdout", "stderr"} {
		t.Run(stream, func(t *testing.T) {
			redirect := ""
			if stream == "stderr" {
				redirect = " >&2"
			}
			o := e.run(t, e.w.Flood(stream == "stderr"))
			expectLimits(t, "yes", o, sandbox.ReasonOutputLimit, sandbox.LimitOutput)
			got, truncated, other := o.stdout, o.res.StdoutTruncated, o.res.StderrTruncated
			if stream == "stderr" {
				got, truncated, other = o.stderr, o.res.StderrTruncated, o.res.StdoutTruncated
			}
			if !truncated || other {
				t.Errorf("yes%s: want only %sTruncated set, got %s", redirect, stream, o)
			}
			if len(got) != limit {
				t.Errorf("yes%s: %d bytes delivered, want exactly the limit %d", redirect, len(got), limit)
			}
			if want := bytes.Repeat([]byte("y\n"), limit/2); got != string(want) {
				t.Errorf("yes%s: what was delivered is not yes's output", redirect)
			}
			if o.wall > 3*time.Second {
				t.Errorf("the flood was stopped only after %v", o.wall)
			}
		})
	}
}

// testFill fills dir (sized 16 MiB) past its size with two files.
func testFill(t *testing.T, e *env, dir string) {
	o := e.run(t, e.w.WriteZeros(12<<20, dir+"/fill1", dir+"/fill2"))
	if o.res.ExitCode == 0 {
		t.Errorf("writing 24 MiB into a 16 MiB %s succeeded: %s", dir, o)
	}
	// A Linux userland says ENOSPC; everywhere, limits_hit says disk_full.
	if e.caps.Shell && !strings.Contains(o.stderr, "No space left on device") {
		t.Errorf("writing past the size of %s did not fail with ENOSPC: %s", dir, o)
	}
	expectLimits(t, "filling "+dir, o, sandbox.ReasonExit, sandbox.LimitDiskFull)
	// Freeing the space makes the file system usable again.
	for _, f := range []string{"fill1", "fill2"} {
		if err := e.sb.Files().Remove(e.ctx, dir+"/"+f); err != nil {
			t.Errorf("remove %s/%s: %v", dir, f, err)
		}
	}
	e.ok(t, e.w.WriteZeros(4<<20, dir+"/again"))
	if err := e.sb.Files().Remove(e.ctx, dir+"/again"); err != nil {
		t.Errorf("remove %s/again: %v", dir, err)
	}
}
