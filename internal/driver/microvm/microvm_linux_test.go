package microvm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

func TestMain(m *testing.M) { agenttest.Main(m) }

// smallLimits are the conformance suite's limits: a 256 MiB guest.
var smallLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 10 * time.Second, Lifetime: 2 * time.Minute,
	DiskBytes: 32 << 20, TmpBytes: 16 << 20}

// requireMicroVM skips (or fails, under AIRLOCK_TEST_REQUIRE) unless this
// host can run microVM sandboxes: root, cgroups, QEMU, and the guest
// kernel in the cache (`make microvm-assets` fetches it).
func requireMicroVM(t *testing.T, d *Driver) {
	t.Helper()
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	testcap.Require(t, "root", cg, "qemu")
	if err := d.Probe(context.Background()); err != nil {
		testcap.SkipOrFail(t, "qemu", "the microvm driver cannot run here: %v", err)
	}
}

func newDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatalf("microvm.New: %v", err)
	}
	requireMicroVM(t, d)
	return d
}

// sandboxT creates a sandbox that is closed at the end of the test.
func sandboxT(t *testing.T, d *Driver, spec sandbox.Spec) sandbox.Instance {
	t.Helper()
	if spec.Limits == (sandbox.Limits{}) {
		spec.Limits = smallLimits
	}
	start := time.Now()
	in, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Logf("created %s in %v (restored: %v)", in.ID(), time.Since(start).Round(time.Millisecond), hostOf(in).Restored)
	t.Cleanup(func() {
		if err := in.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return in
}

func hostOf(in sandbox.Instance) *host { return in.(*agentdriver.Instance).Host().(*host) }

// sh runs script in in and returns its stdout, failing unless it exits 0.
func sh(t *testing.T, in sandbox.Instance, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("sh -c %q: %v", script, err)
	}
	if res.ExitCode != 0 || res.Reason != sandbox.ReasonExit {
		t.Fatalf("sh -c %q: exit %d reason %s: %s %s", script, res.ExitCode, res.Reason, out.String(), errb.String())
	}
	return out.String()
}

func TestSmoke(t *testing.T) {
	d := newDriver(t, Options{})
	in := sandboxT(t, d, sandbox.Spec{})
	got := sh(t, in, "echo hello; id; hostname; cat /etc/machine-id; uname -r")
	t.Logf("%s", got)
	if !strings.HasPrefix(got, "hello\nuid=1000") {
		t.Fatalf("got %q", got)
	}
}

// Unsupported are the cases of the conformance suite this driver cannot
// pass the same way, and why: none.
var Unsupported = map[string]string{}

// TestConformance runs the whole suite on sandboxes restored from a
// snapshot, the default path.
func TestConformance(t *testing.T) {
	d := newDriver(t, Options{})
	lc := &leakChecker{}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Driver { return d }, sandboxtest.Options{
		Unsupported: Unsupported, Leaks: lc.check,
		Egress: func(t *testing.T, proxy *egress.Proxy) sandbox.Driver {
			return newDriver(t, Options{Egress: proxy})
		},
		FreezeAgent: freezeSandbox,
	})
}

// freezeSandbox freezes QEMU's host cgroup: the whole machine, and with it
// the agent, stops.
func freezeSandbox(t *testing.T, sb sandbox.Instance) func() {
	g := hostOf(sb).group
	if err := g.Freeze(5 * time.Second); err != nil {
		t.Fatalf("freeze the sandbox: %v", err)
	}
	return func() { g.Thaw() }
}

// leakChecker finds what a closed microVM sandbox left on the host.
type leakChecker struct{ mu sync.Mutex }

// check fails t when anything of the sandbox id remains: a process in its
// cgroup (QEMU starts in it), a cgroup directory in any hierarchy, its
// lock.
func (lc *leakChecker) check(t *testing.T, id string) {
	t.Helper()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	found := findLeaks(id)
	if len(found) == 0 {
		return
	}
	time.Sleep(2 * time.Second)
	later := findLeaks(id)
	t.Errorf("sandbox %s left this on the host right after Close:\n  %s\n2 s later, %d of them remain:\n  %s",
		id, strings.Join(found, "\n  "), len(later), strings.Join(later, "\n  "))
}

func findLeaks(id string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err != nil {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		for _, line := range strings.Split(string(cg), "\n") {
			if strings.Contains(line, "/airlock/"+id+"/") || strings.HasSuffix(line, "/airlock/"+id) {
				found = append(found, fmt.Sprintf("process %s is in the sandbox's cgroup: %s", ent.Name(), line))
				break
			}
		}
	}
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id)
	if _, err := os.Stat("/sys/fs/cgroup/airlock/" + id); err == nil {
		mounts = append(mounts, "/sys/fs/cgroup/airlock/"+id)
	}
	for _, m := range mounts {
		found = append(found, "cgroup directory "+m)
	}
	if _, err := os.Lstat("/run/airlock/sandboxes/" + id + ".lock"); err == nil {
		found = append(found, "lock /run/airlock/sandboxes/"+id+".lock")
	}
	return found
}
