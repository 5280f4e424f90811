package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api/e2b/sdktest"
	"github.com/airlock-sandbox/airlock/internal/driver/microvm"
	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// wantRows are the ids of a complete report with steps 1, 2, 4 and one
// client count, in table order.
func wantRows(clients []int) []string {
	ids := []string{idHelloGo, idVersion}
	for _, w := range []string{"start/true", "start/python"} {
		for _, l := range []string{"fork-exec", "unshare", "bwrap", "airlock-native", "airlock-gvisor", "runsc-do", "airlock-microvm", "qemu"} {
			ids = append(ids, w+"/"+l)
		}
	}
	ids = append(ids, "exec/native", "exec/http", idDockerRun, idAirlockDocker, idDockerExec, idDockerClaim,
		"microvm/cold", "microvm/snapshot", "microvm/exec", "microvm/idle-pss",
		"microvm/pause-256m", "microvm/pause-image-256m", "microvm/resume-256m", "microvm/pause-1g", "microvm/pause-image-1g", "microvm/resume-1g",
		"density/create", "density/create-at-1", "density/create-at-2", "density/create-at-4", "density/exec-1", "density/exec-2", "density/exec-4", "density/bend",
		"density/pss", "density/cgroup", "density/tasks", "density/host", "density/kernel", "density/pss-bwrap", "density/cgroup-bwrap", "density/pss-process",
		"density/cgroup-process", "density/close", "density/close-all",
		"egress/direct", "egress/latency", "egress/direct-download", "egress/throughput",
		"egress/client-direct", "egress/sandbox-latency", "egress/client-direct-download", "egress/sandbox-throughput",
		"egress/https-tunnel", "egress/https-intercept", "egress/https-direct-download", "egress/https-tunnel-download", "egress/https-intercept-download",
		"egress/sandbox-https-tunnel", "egress/sandbox-https-intercept", "egress/sandbox-https-direct-download", "egress/sandbox-https-tunnel-download", "egress/sandbox-https-intercept-download",
		"wasm/instantiate", "wasm/python", "wasm/python-warm",
		"snapshots/first", "snapshots/incremental", "snapshots/restore", "snapshots/create", "snapshots/fork", "snapshots/diff",
		"export/direct", "export/throughput")
	for _, c := range clients {
		for _, l := range []string{"fork-exec", "bwrap", "airlock-native"} {
			ids = append(ids, fmt.Sprintf("throughput/%s-c%d", l, c))
		}
	}
	for _, c := range clients {
		ids = append(ids, fmt.Sprintf("throughput/wasm-python-c%d", c))
	}
	ids = append(ids, "restart/reattach")
	ids = append(ids, "e2b/create-run-cold", "e2b/create-run-pool", "e2b/run-code",
		"e2b/published-e2b", "e2b/published-computesdk", "e2b/published-cubesandbox")
	ids = append(ids, "ports/direct", "ports/latency", "ports/direct-download", "ports/throughput", "ports/relay-download", "ports/throughput-no-network")
	ids = append(ids, idImageDockerPull, idImageFirst, idImageComposed, idImageCached)
	ids = append(ids, pauseRowIDs()...)
	ids = append(ids, "livefork/first-exec")
	return ids
}

// buildAirlock builds the airlock CLI whose `airlock run` the bench times;
// it finds its agent through AIRLOCK_AGENT, which TestMain set.
func buildAirlock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "airlock")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/airlock-sandbox/airlock/cmd/airlock-full")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build airlock: %v\n%s", err, out)
	}
	return bin
}

// TestQuickBenchIsComplete runs the bench with tiny counts and checks that
// the report has every row, that what this host can run was measured, and
// that the table, JSON and chart show all of it.
func TestQuickBenchIsComplete(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "wasm")
	if dockerErr != nil {
		t.Run("docker", func(t *testing.T) {
			testcap.SkipOrFail(t, "docker", "no Docker engine or image for the docker rows (they are reported missing): %v", dockerErr)
		})
	}
	o := Options{Quick: true, TrueRuns: 3, PythonRuns: 2, Density: 4, ThroughputTime: 200 * time.Millisecond,
		Clients: []int{2}, RowTime: 10 * time.Second, Settle: 0, Airlock: buildAirlock(t), DockerImage: dockerImage}
	// The e2b rows need Node.js, the SDKs and a Jupyter kernel: where the
	// host has them they must be measured, elsewhere they say what is
	// missing.
	e2bReady := testcap.Probe(context.Background(), "node").OK && testcap.Probe(context.Background(), "jupyter").OK
	if e2bReady {
		dir, err := sdktest.Install(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		o.E2BSDK = dir
	}
	var progress bytes.Buffer
	o.Progress = &progress
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}

	var ids []string
	for _, row := range r.Rows {
		ids = append(ids, row.ID)
	}
	if want := wantRows(o.Clients); !slices.Equal(ids, want) {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}

	// What must have been measured here, what may be missing, what is not built.
	_, bwrapErr := exec.LookPath("bwrap")
	_, s3Err := s3server.Find(testrig.CacheDir())
	vmWant := []Status{StatusOK}
	if d, err := microvm.New(microvm.Options{}); err != nil || d.Probe(ctx) != nil {
		vmWant = []Status{StatusMissing, StatusFailed}
	}
	for _, row := range r.Rows {
		var want []Status
		switch {
		case strings.HasPrefix(row.ID, "microvm/") && strings.HasSuffix(row.ID, "-1g") && slices.Contains(vmWant, StatusOK):
			want = []Status{StatusSkipped} // a 1 GiB guest's pause is left out of a quick run
		case strings.Contains(row.ID, "microvm"), strings.HasSuffix(row.ID, "/qemu"):
			want = vmWant
		case strings.HasSuffix(row.ID, "/runsc-do"), strings.HasSuffix(row.ID, "gvisor"):
			want = []Status{StatusOK, StatusMissing, StatusFailed} // Debian's runsc fails on some kernels
		case strings.Contains(row.ID, "bwrap") && bwrapErr != nil:
			want = []Status{StatusMissing}
		case row.Section == "docker" && dockerImage == "":
			want = []Status{StatusMissing}
		case row.ID == "density/host" || row.ID == "density/kernel":
			// Four sandboxes are within what the machine's other work moves
			// MemAvailable and the slab by.
			want = []Status{StatusOK, StatusSkipped}
		case row.Section == "image": // measured by TestImageRows
			want = []Status{StatusMissing}
		case (row.Section == "pause" || row.Section == "livefork") && !testcap.Probe(ctx, "runsc").OK:
			want = []Status{StatusFailed}
		case row.Section == "export" && s3Err != nil:
			want = []Status{StatusMissing}
		case (strings.HasPrefix(row.ID, "e2b/create") || row.ID == "e2b/run-code") && !e2bReady:
			want = []Status{StatusMissing}
		default:
			want = []Status{StatusOK}
		}
		if !slices.Contains(want, row.Status) {
			t.Errorf("%s: status %s (%s), want one of %v", row.ID, row.Status, row.Detail, want)
		}
		if row.Status != StatusOK && row.Detail == "" {
			t.Errorf("%s: status %s without a reason", row.ID, row.Status)
		}
		if row.Status == StatusOK {
			if _, ok := row.Figure(); !ok && row.ID != "density/bend" {
				t.Errorf("%s: measured but has no figure", row.ID)
			}
			for _, c := range row.Compare {
				if base, _ := r.Row(c.Baseline); base.Status == StatusOK && c.Ratio == nil {
					t.Errorf("%s: no ratio beside measured baseline %s", row.ID, c.Baseline)
				}
			}
		}
	}
	if p, _ := r.Row("density/pss"); p.Value == nil || *p.Value < 0.5 || *p.Value > 64 {
		t.Errorf("PSS per idle sandbox = %v MiB, want between 0.5 and 64", p.Value)
	}
	if c, _ := r.Row("density/cgroup"); c.Value == nil || *c.Value <= 0 {
		t.Errorf("cgroup memory per idle sandbox = %v MiB, want more than 0", c.Value)
	}
	if len(r.Density) != 3 || r.Density[2].Sandboxes != 4 {
		t.Errorf("density steps = %+v, want 1, 2, 4 sandboxes", r.Density)
	}
	if a, _ := r.Row("start/true/airlock-native"); a.Status == StatusOK && a.Stats.P50 < 0.1 {
		t.Errorf("airlock run p50 = %g ms: not a real start", a.Stats.P50)
	}

	// Nothing is left behind: the baseline cgroups are gone.
	if _, err := os.Stat(fmt.Sprintf("/sys/fs/cgroup/memory/airlock-bench-%d", os.Getpid())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("baseline cgroup left behind: %v", err)
	}

	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		if !strings.Contains(table.String(), "  "+row.What) {
			t.Errorf("table lacks row %s (%q)", row.ID, row.What)
		}
		if row.Status == StatusNotBuilt && !strings.Contains(table.String(), "not built yet") {
			t.Errorf("table does not say not built yet")
		}
	}
	t.Logf("table:\n%s", table.String())

	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(&js)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(r.Rows) {
		t.Errorf("JSON round trip: %d rows, want %d", len(back.Rows), len(r.Rows))
	}
	var svg bytes.Buffer
	if err := r.WriteChart(&svg); err != nil {
		t.Fatal(err)
	}
	svgElements(t, svg.Bytes())
	if !strings.Contains(progress.String(), "bench: density") {
		t.Errorf("no progress reported:\n%s", progress.String())
	}
}

// TestOnlyEgress runs the egress section alone: the report has its rows
// and no other, all measured (a sandbox's python3 downloaded through its
// agent tunnel, every byte of it), and an unknown section is refused.
func TestOnlyEgress(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1")
	o := Defaults(true)
	o.SetRuns(3)
	o.Only = []string{"nosuch"}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "egress") {
		t.Fatalf("an unknown section: %v, want an error naming the sections", err)
	}
	o.Only = []string{"egress"}
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, row := range r.Rows {
		ids = append(ids, row.ID)
		if row.Section != "egress" || row.Status != StatusOK {
			t.Errorf("%s: section %s, status %s (%s); want egress, ok", row.ID, row.Section, row.Status, row.Detail)
		}
	}
	if want := []string{"egress/direct", "egress/latency", "egress/direct-download", "egress/throughput",
		"egress/client-direct", "egress/sandbox-latency", "egress/client-direct-download", "egress/sandbox-throughput",
		"egress/https-tunnel", "egress/https-intercept", "egress/https-direct-download", "egress/https-tunnel-download", "egress/https-intercept-download",
		"egress/sandbox-https-tunnel", "egress/sandbox-https-intercept", "egress/sandbox-https-direct-download", "egress/sandbox-https-tunnel-download", "egress/sandbox-https-intercept-download"}; !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v", ids, want)
	}
	if row, _ := r.Row("egress/sandbox-throughput"); row.Compare[0].Ratio == nil || *row.Compare[0].Ratio <= 0 {
		t.Errorf("the tunnel's download has no ratio to direct: %+v", row.Compare)
	}
	if row, _ := r.Row("egress/https-intercept-download"); row.Compare[0].Ratio == nil || *row.Compare[0].Ratio <= 0 {
		t.Errorf("the intercepted download has no ratio to direct: %+v", row.Compare)
	}
	if row, _ := r.Row("egress/sandbox-https-intercept-download"); row.Compare[0].Ratio == nil || *row.Compare[0].Ratio <= 0 {
		t.Errorf("the sandbox's intercepted download has no ratio to direct: %+v", row.Compare)
	}
}

// TestOnlyPorts runs the ports section alone: a server in a native
// sandbox answers through its exposed port, every byte of the download,
// beside the same server on the host.
func TestOnlyPorts(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1")
	o := Defaults(true)
	o.SetRuns(3)
	o.Only = []string{"ports"}
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, row := range r.Rows {
		ids = append(ids, row.ID)
		if row.Section != "ports" || row.Status != StatusOK {
			t.Errorf("%s: section %s, status %s (%s); want ports, ok", row.ID, row.Section, row.Status, row.Detail)
		}
	}
	if want := []string{"ports/direct", "ports/latency", "ports/direct-download", "ports/throughput", "ports/relay-download", "ports/throughput-no-network"}; !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v", ids, want)
	}
	for _, row := range r.Rows {
		if row.Value != nil {
			t.Logf("%s: %.1f %s", row.ID, *row.Value, row.Unit)
		} else {
			t.Logf("%s: p50 %.3f %s", row.ID, row.Stats.P50, row.Unit)
		}
	}
	for _, id := range []string{"ports/latency", "ports/throughput", "ports/relay-download", "ports/throughput-no-network"} {
		if row, _ := r.Row(id); row.Compare[0].Ratio == nil || *row.Compare[0].Ratio <= 0 {
			t.Errorf("%s has no ratio to direct: %+v", id, row.Compare)
		} else {
			t.Logf("%s: %.2f× direct (%s)", id, *row.Compare[0].Ratio, row.Detail)
		}
	}
}
