package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/api/e2b"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The e2b section times what an agent written for E2B waits for, through
// the official JS SDKs (e2b, @e2b/code-interpreter, from the npm project
// Options.E2BSDK) against the daemon's E2B endpoints on 127.0.0.1, native
// driver: a create and the first commands.run, cold and from a warm pool,
// and runCode("1+1") in a warm context. Published figures of E2B's cloud
// and of CubeSandbox are rows of their own, for the ratios; they were not
// measured here.

// e2bPool is the warm pool the pooled rows claim from.
const e2bPool = 4

// e2bPublished are the published figures the e2b rows are set beside
// (docs/peers: /work/shared/research/peers-2026-11.md).
var e2bPublished = []struct {
	id, what string
	ms       float64
}{
	{"e2b/published-e2b", "published: E2B cloud, sandbox start (e2b.dev, ~150 ms; not measured here)", 150},
	{"e2b/published-computesdk", "published: E2B cloud, create to first command p50 (ComputeSDK 2026-05-05; not measured here)", 491},
	{"e2b/published-cubesandbox", "published: CubeSandbox self-hosted create through the E2B SDK (2026-06-01; not measured here)", 47.8},
}

// e2bResult is what sdktest/bench.mjs prints.
type e2bResult struct {
	Cold    []float64 `json:"cold"`
	Pool    []float64 `json:"pool"`
	RunCode []float64 `json:"runCode"`
	Errors  []string  `json:"errors"`
}

func e2bRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) []Row {
	cmp := func(ids ...string) []Comparison {
		var c []Comparison
		for _, id := range ids {
			for _, p := range e2bPublished {
				if p.id == id {
					c = append(c, Comparison{Baseline: id, Name: strings.TrimPrefix(id, "e2b/published-")})
				}
			}
		}
		return c
	}
	rows := []Row{
		{Section: "e2b", ID: "e2b/create-run-cold", What: "create + first commands.run, official JS SDK (native, cold)", Compare: cmp("e2b/published-e2b", "e2b/published-computesdk", "e2b/published-cubesandbox")},
		{Section: "e2b", ID: "e2b/create-run-pool", What: "create + first commands.run, official JS SDK (native, warm pool)", Compare: cmp("e2b/published-e2b", "e2b/published-computesdk", "e2b/published-cubesandbox")},
		{Section: "e2b", ID: "e2b/run-code", What: "runCode(\"1+1\") in a warm context, @e2b/code-interpreter (Jupyter kernel)"},
	}
	for _, p := range e2bPublished {
		v := p.ms
		rows = append(rows, Row{Section: "e2b", ID: p.id, What: p.what, Status: StatusOK, Unit: UnitMS, Value: &v})
	}
	measured := rows[:3]
	setAll := func(st Status, detail string) []Row {
		for i := range measured {
			measured[i].Status, measured[i].Detail = st, detail
		}
		return rows
	}
	if drvErr != nil {
		return setAll(StatusFailed, "the native driver cannot run here: "+drvErr.Error())
	}
	if o.E2BSDK == "" {
		return setAll(StatusMissing, "the E2B SDKs: run `npm ci` in internal/api/e2b/sdktest (Node.js 18 or later) and give `airlock bench --e2b-sdk internal/api/e2b/sdktest`")
	}
	if _, err := os.Stat(filepath.Join(o.E2BSDK, "node_modules", "e2b", "package.json")); err != nil {
		return setAll(StatusMissing, fmt.Sprintf("no e2b package under %s: run `npm ci` there", o.E2BSDK))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return setAll(StatusMissing, "apt-get install nodejs npm (Node.js 18 or later)")
	}
	res, err := runE2BBench(ctx, o, drv, node, progress)
	if err != nil {
		return setAll(StatusFailed, err.Error())
	}
	for i, samples := range [][]float64{res.Cold, res.Pool, res.RunCode} {
		var s series
		for _, ms := range samples {
			s.samples = append(s.samples, time.Duration(ms*float64(time.Millisecond)))
		}
		s.fails = len(res.Errors)
		if len(res.Errors) > 0 {
			s.firstErr = fmt.Errorf("%s", res.Errors[0])
		}
		measured[i] = latencyRow(measured[i], s)
	}
	return rows
}

// runE2BBench serves the E2B endpoints over a supervisor with drv, the way
// `airlock serve` does, and runs sdktest/bench.mjs against them.
func runE2BBench(ctx context.Context, o Options, drv sandbox.Driver, node string, progress func(string, ...any)) (e2bResult, error) {
	var res e2bResult
	dir, err := os.MkdirTemp("", "airlock-bench-e2b-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return res, err
	}
	defer st.Close()
	cfg := supervisor.Config{
		// The pooled template has E2B's home: E2B creates claim only
		// from pools whose sandboxes have it (e2b.go warns otherwise).
		Templates: []supervisor.Template{{Name: "default"}, {Name: "pooled", Pool: e2bPool, Home: "/home/user"}},
		E2B:       supervisor.E2BConfig{Templates: []string{"base=default", "code-interpreter-v1=default", "pooled=pooled"}},
	}
	metrics := supervisor.NewMetrics(prometheus.NewRegistry())
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg, Metrics: metrics})
	if err != nil {
		return res, err
	}
	cfg = sup.Config()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go sup.Run(sctx)
	defer sup.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	srv, err := api.New(api.Options{Supervisor: sup, Store: st, ListenAddr: ln.Addr().String(), Gatherer: prometheus.NewRegistry()})
	if err != nil {
		return res, err
	}
	eh, err := e2b.New(e2b.Options{Supervisor: sup, Store: st, API: srv, Config: cfg.E2B})
	if err != nil {
		return res, err
	}
	defer eh.Close(context.WithoutCancel(ctx))
	hs := &http.Server{Handler: eh, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	_, secret, err := st.NewKeyFormat(nil, "bench", store.RoleAgent, store.Quota{MaxSandboxes: 8},
		store.RateLimits{CreatesPerSecond: 1e6, CreateBurst: 1e6, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6}, time.Now(), store.FormatE2B)
	if err != nil {
		return res, err
	}
	n := max(5, o.PythonRuns)
	progress("e2b: %d creates cold and %d from a pool, %d runCode, through the official JS SDK", n, n, n)
	url := "http://" + ln.Addr().String()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer rcancel()
	cmd := exec.CommandContext(rctx, node, "bench.mjs", fmt.Sprint(n))
	cmd.Dir = o.E2BSDK
	cmd.Env = append(os.Environ(), "E2B_API_KEY="+string(secret), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("node bench.mjs: %w: %s", err, lastLines(stderr.String(), 3))
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
		return res, fmt.Errorf("node bench.mjs printed %q: %w", lastLines(string(out), 3), err)
	}
	// A pooled row whose creates started sandboxes instead of claiming
	// them measures a cold create: say so rather than report it.
	var hits dto.Metric
	if err := metrics.PoolHits.WithLabelValues("pooled").Write(&hits); err != nil {
		return res, err
	}
	if got := int(hits.GetCounter().GetValue()); got < len(res.Pool) {
		res.Errors = append(res.Errors, fmt.Sprintf("pool: %d of %d pooled creates claimed from the pool", got, len(res.Pool)))
	}
	return res, nil
}

// lastLines returns the last n lines of s, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
