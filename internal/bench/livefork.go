package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Live fork rows: the supervisor over the gVisor driver as the daemon
// makes it. A 256 MiB sandbox runs a Python HTTP server in the
// background; a live fork into one copy is timed to the copy's first
// exec (the source runs on), and the copy is deleted. Issue 35: "a live
// fork's time to a first exec".

// forkServer is the source's background process.
const forkServer = `import http.server
http.server.HTTPServer(('127.0.0.1', 8000), http.server.SimpleHTTPRequestHandler).serve_forever()
`

func liveForkRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	rows := []Row{
		{Section: "livefork", ID: "livefork/first-exec", What: "live fork of a 256 MiB gVisor sandbox (a Python server running) to a first exec in the copy", Unit: UnitMS},
	}
	failAll := func(err error) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	drv, err := gvisor.New(gvisor.Options{Persistent: true})
	if err == nil {
		err = drv.Probe(ctx)
	}
	if err != nil {
		return failAll(fmt.Errorf("the gvisor driver cannot run here: %w", err))
	}
	dir, err := os.MkdirTemp("", "airlock-bench-livefork-")
	if err != nil {
		return failAll(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return failAll(err)
	}
	defer st.Close()
	cfg := supervisor.Config{StateDir: dir, Templates: []supervisor.Template{{Name: supervisor.DefaultTemplate, Driver: "gvisor",
		Memory: 256 << 20, Timeout: supervisor.Duration(60 * time.Second)}}}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"gvisor": drv}, Config: cfg})
	if err != nil {
		return failAll(err)
	}
	defer sup.Close(context.WithoutCancel(ctx))
	c := supervisor.Caller{KeyID: "bench", Quota: store.Quota{MaxSandboxes: 64},
		Rate: store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6, MaxInFlight: 64}}
	progress("livefork: a 256 MiB gVisor sandbox with a server, forked live")
	in, err := sup.Create(ctx, c, supervisor.CreateRequest{})
	if err != nil {
		return failAll(err)
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, in.ID) }()
	if _, err := sup.StartProcess(ctx, c, in.ID, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{Code: forkServer, Language: "python"}}); err != nil {
		return failAll(err)
	}
	s, err := timeRuns(ctx, 5, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		res, err := sup.LiveFork(ctx, c, supervisor.LiveForkRequest{Sandbox: in.ID})
		if err != nil {
			return 0, err
		}
		clone := res.Sandboxes[0].ID
		defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, clone) }()
		r, err := sup.Exec(ctx, c, clone, supervisor.ExecRequest{Argv: []string{"true"}})
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exec true in the copy: %s %s", r.Reason, r.Message)
		}
		return time.Since(start), err
	})
	if err != nil {
		return failAll(err)
	}
	rows[0] = latencyRow(rows[0], s)
	return rows
}
