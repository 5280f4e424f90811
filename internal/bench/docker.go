package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/driver/docker"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The docker section: a one-shot start through the bare engine and through
// airlock on the same image and runtime, the exec round trip in a live
// Docker sandbox, and a claim from a warm pool.
const (
	idDockerRun     = "docker/true/docker-run"
	idAirlockDocker = "docker/true/airlock-docker"
	idDockerExec    = "docker/exec"
	idDockerClaim   = "docker/claim"
)

// dockerRuntime is the runtime of the docker rows.
func (o Options) dockerRuntime() string {
	if o.DockerRuntime == "" {
		return docker.DefaultRuntime
	}
	return o.DockerRuntime
}

// dockerRows measures the docker section, or says why it cannot.
func dockerRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	rt := o.dockerRuntime()
	rows := []Row{
		{Section: "docker", ID: idDockerRun, What: fmt.Sprintf("docker run --rm /bin/true (bare engine, runtime %s, the CLI)", rt), Unit: UnitMS},
		{Section: "docker", ID: idAirlockDocker, What: fmt.Sprintf("airlock run --driver docker /bin/true (runtime %s, whole CLI)", rt), Unit: UnitMS,
			Compare: []Comparison{{Baseline: idDockerRun, Name: "docker run"}}},
		{Section: "docker", ID: idDockerExec, What: fmt.Sprintf("exec /bin/true, live docker sandbox (runtime %s), in-process", rt), Unit: UnitMS,
			Compare: []Comparison{{Baseline: "exec/native", Name: "native exec"}}},
		{Section: "docker", ID: idDockerClaim, What: fmt.Sprintf("create from a warm pool over the HTTP API (docker, runtime %s)", rt), Unit: UnitMS,
			Compare: []Comparison{{Baseline: idDockerRun, Name: "docker run"}}},
	}
	fail := func(status Status, detail string) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = status, detail
		}
		return rows
	}
	if o.DockerImage == "" {
		return fail(StatusMissing, "give --docker-image IMAGE, an image the engine has (docker images)")
	}
	d, err := docker.New(docker.Options{Image: o.DockerImage, Runtime: rt})
	if err == nil {
		err = d.Probe(ctx)
	}
	if err != nil {
		return fail(StatusMissing, err.Error())
	}
	bare, status, detail := resolve(launcher{prefix: []string{"docker", "run", "--rm", "--network", "none", "--runtime", rt, o.DockerImage}, fix: "apt-get install docker.io"})
	al, alStatus, alDetail := resolve(launcher{prefix: []string{o.Airlock, "run", "--driver", "docker", "--image", o.DockerImage, "--runtime", rt, "--"}})
	switch {
	case status != StatusOK:
		rows[0].Status, rows[0].Detail = status, detail
		rows[1].Status, rows[1].Detail = StatusFailed, "no baseline: "+detail
	case alStatus != StatusOK:
		rows[1].Status, rows[1].Detail = alStatus, alDetail
	default:
		progress("docker: docker run and airlock run --driver docker, %d runs each, alternately", o.PythonRuns)
		sb, sa, err := timePair(ctx, o, o.PythonRuns, append(bare, trueArgv...), append(al, trueArgv...))
		if err != nil {
			return fail(StatusFailed, err.Error())
		}
		rows[0], rows[1] = latencyRow(rows[0], sb), latencyRow(rows[1], sa)
	}
	rows[2] = dockerExecRow(ctx, o, d, rows[2], progress)
	rows[3] = dockerClaimRow(ctx, o, rows[3], progress)
	return rows
}

// timePair times the one-shot commands a and b n times each (o.PythonRuns:
// a start through the engine costs about what python3 does), one after the
// other and in turns, so that both see the same load: on a busy machine a
// row timed after another is not comparable with it.
func timePair(ctx context.Context, o Options, n int, a, b []string) (sa, sb series, err error) {
	w, err := newCmdWorker(o.runTimeout())
	if err != nil {
		return sa, sb, err
	}
	defer w.close()
	record := func(s *series, d time.Duration, err error) {
		if err != nil {
			s.fails++
			if s.firstErr == nil {
				s.firstErr = err
			}
			return
		}
		s.samples = append(s.samples, d)
	}
	for range warmups(n) {
		_, _ = w.run(ctx, a)
		_, _ = w.run(ctx, b)
	}
	deadline := time.Now().Add(6 * o.RowTime)
	for i := 0; i < n && time.Now().Before(deadline); i++ {
		first, second, fs, ss := a, b, &sa, &sb
		if i%2 == 1 {
			first, second, fs, ss = b, a, &sb, &sa
		}
		d, err := w.run(ctx, first)
		record(fs, d, err)
		d, err = w.run(ctx, second)
		record(ss, d, err)
		if ctx.Err() != nil {
			return sa, sb, ctx.Err()
		}
		if len(sa.samples)+len(sb.samples) == 0 && sa.fails >= maxFailsWithoutSuccess {
			break
		}
	}
	return sa, sb, nil
}

// dockerExecRow times exec of /bin/true in one live Docker sandbox.
func dockerExecRow(ctx context.Context, o Options, d *docker.Driver, row Row, progress func(string, ...any)) Row {
	progress("docker: %d execs in one sandbox", o.TrueRuns)
	in, err := d.Create(ctx, liveSpec())
	if err != nil {
		row.Status, row.Detail = StatusFailed, err.Error()
		return row
	}
	sb := &guarded{sb: in}
	defer func() { _ = sb.close(ctx) }()
	s, err := timeRuns(ctx, o.TrueRuns, max(5, warmups(o.TrueRuns)), o.RowTime, sb.exec)
	if err != nil {
		row.Status, row.Detail = StatusFailed, err.Error()
		return row
	}
	return latencyRow(row, s)
}

// dockerClaimRow times creates over the HTTP API that a warm pool of
// Docker sandboxes answers: the daemon's supervisor and API on 127.0.0.1,
// a template with a pool of 2; each create waits until the pool has a
// sandbox ready, and the sandbox is deleted untimed.
func dockerClaimRow(ctx context.Context, o Options, row Row, progress func(string, ...any)) Row {
	fail := func(err error) Row {
		row.Status, row.Detail = StatusFailed, err.Error()
		return row
	}
	d, err := docker.New(docker.Options{Image: o.DockerImage, Runtime: o.dockerRuntime(), Persistent: true, Instance: fmt.Sprintf("bench-%d", os.Getpid())})
	if err != nil {
		return fail(err)
	}
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	const tmpl = "docker"
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: tmpl, Driver: "docker", Image: o.DockerImage, Runtime: o.DockerRuntime, Pool: 2}}}
	reg := prometheus.NewRegistry()
	sup, err := supervisor.New(supervisor.Options{Store: st, Config: cfg, Drivers: map[string]sandbox.Driver{"docker": d}, Metrics: supervisor.NewMetrics(reg)})
	if err != nil {
		return fail(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go sup.Run(sctx)
	defer sup.Close(context.WithoutCancel(ctx))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	srv, err := api.New(api.Options{Supervisor: sup, Store: st, ListenAddr: ln.Addr().String(), Gatherer: reg})
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	_, secret, err := st.NewKey("bench", store.RoleAgent, store.Quota{MaxSandboxes: 4},
		store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100, ExecsPerSecond: 1e6, ExecBurst: 1e6}, time.Now())
	if err != nil {
		return fail(err)
	}
	c, err := client.New("http://"+ln.Addr().String(), string(secret))
	if err != nil {
		return fail(err)
	}
	ready := func(ctx context.Context) error {
		deadline := time.Now().Add(60 * time.Second)
		for {
			for _, p := range sup.Pools() {
				if p.Template == tmpl && p.Ready > 0 {
					return nil
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool had no sandbox ready within 60 s")
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	progress("docker: %d creates from a warm pool", o.PythonRuns)
	s, err := timeRuns(ctx, o.PythonRuns, 1, max(o.RowTime, 2*time.Minute), func(ctx context.Context) (time.Duration, error) {
		if err := ready(ctx); err != nil {
			return 0, err
		}
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: tmpl})
		took := time.Since(start)
		if err != nil {
			return took, err
		}
		return took, c.DeleteSandbox(ctx, sb.ID)
	})
	if err != nil {
		return fail(err)
	}
	return latencyRow(row, s)
}
