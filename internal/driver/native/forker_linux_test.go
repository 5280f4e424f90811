package native

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestForkerKilledMidRun: a persistent driver's agents come from its
// forker; killing the forker while sandboxes are being made fails at most
// the creates it was serving (with an error that names the forker),
// leaves nothing of them behind, spares the sandboxes it had started, and
// the next create starts a new forker and succeeds.
func TestForkerKilledMidRun(t *testing.T) {
	requireNative(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	lc := &leakChecker{sandboxes: map[string]sandboxRecord{}}
	rd := &recordingDriver{Driver: d, lc: lc}
	ctx := context.Background()
	first := drivertest.Sandbox(t, rd, sandbox.Spec{}, lc.check)
	fk := forkerOf(d.rc.Agent)
	pid := fk.Pid()
	if pid == 0 {
		t.Fatal("a persistent driver's sandbox was not made by a forker")
	}
	agentPid := first.(*agentdriver.Instance).Host().(*host).agentPid
	if ppid := parentOf(t, agentPid); ppid != pid {
		t.Fatalf("the agent's parent is %d, not the forker %d", ppid, pid)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var made []sandbox.Instance
	var failed []error
	for range 2 {
		wg.Go(func() {
			for range 4 {
				sb, err := rd.Create(ctx, sandbox.Spec{})
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else {
					made = append(made, sb)
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, err := range failed {
		if !strings.Contains(err.Error(), "forker") {
			t.Errorf("a create the forker's death failed says: %v", err)
		}
	}
	t.Logf("%d creates succeeded, %d failed with the forker", len(made), len(failed))
	for _, sb := range made {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
		lc.check(t, sb.ID())
	}
	// What failed creates made is gone: nothing runs in a sandbox's
	// range that this test does not know of, and no cgroup is left (the
	// leak checks of the sandboxes made cover the rest).

	second := drivertest.Sandbox(t, rd, sandbox.Spec{}, lc.check)
	if now := fk.Pid(); now == pid || now == 0 {
		t.Fatalf("forker %d, then %d: not started again", pid, now)
	}
	for _, sb := range []sandbox.Instance{first, second} {
		if _, _, res := drivertest.Run(t, sb, "true"); res.ExitCode != 0 {
			t.Fatalf("exec in %s after the forker died: %+v", sb.ID(), res)
		}
	}
}

// TestDescriptorsPerSandbox: a persistent driver's process holds two
// descriptors per live sandbox: the agent's connection and its pidfd.
func TestDescriptorsPerSandbox(t *testing.T) {
	requireNative(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	lc := &leakChecker{sandboxes: map[string]sandboxRecord{}}
	rd := &recordingDriver{Driver: d, lc: lc}
	_ = drivertest.Sandbox(t, rd, sandbox.Spec{}, lc.check) // the forker starts
	before := openFDs(t)
	const n = 5
	for range n {
		_ = drivertest.Sandbox(t, rd, sandbox.Spec{}, lc.check)
	}
	if got := openFDs(t) - before; got > 2*n {
		t.Fatalf("%d sandboxes hold %d descriptors of the host's, want at most %d", n, got, 2*n)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
