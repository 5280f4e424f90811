package microvm

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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
