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
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// httpExecRow times exec of /bin/true over the daemon's HTTP API: the real
// supervisor, API server and Go SDK, on 127.0.0.1, with drv underneath.
func httpExecRow(ctx context.Context, o Options, drv sandbox.Driver, progress func(string, ...any)) Row {
	row := Row{Section: "exec", ID: "exec/http", What: "exec /bin/true over the HTTP API (native)", Unit: UnitMS,
		Compare: []Comparison{{Baseline: "exec/native", Name: "in-process"}}}
	fail := func(err error) Row {
		row.Status, row.Detail = StatusFailed, err.Error()
		return row
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
	reg := prometheus.NewRegistry()
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Metrics: supervisor.NewMetrics(reg)})
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
	progress("exec: %d execs over the HTTP API", o.TrueRuns)
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		return fail(fmt.Errorf("create a sandbox over the API: %w", err))
	}
	defer func() { _ = c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID) }()
	s, err := timeRuns(ctx, o.TrueRuns, max(5, warmups(o.TrueRuns)), o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: trueArgv})
		d := time.Since(start)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", r.ExitCode, r.Stderr)
		}
		return d, err
	})
	if err != nil {
		return fail(err)
	}
	return latencyRow(row, s)
}
