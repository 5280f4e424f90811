package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// restartRows measures (section "restart") how long a daemon takes to
// reattach to live sandboxes after a restart: a supervisor with the native
// driver as the daemon makes it (persistent) creates o.Density sandboxes
// (fewer when memory is short), lets go of them as a stopping daemon does,
// and a new supervisor with a fresh driver on the same registry takes them
// all up again (Recover), before it would serve.
func restartRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	row := Row{Section: "restart", ID: "restart/reattach", Unit: UnitMS}
	n, err := reattachTime(ctx, o, &row, progress)
	row.What = fmt.Sprintf("reattach %s after a daemon restart (native)", sandboxes(n))
	if err != nil {
		row.Status, row.Detail = StatusFailed, err.Error()
	}
	return []Row{row}
}

// reattachTime fills row with the time Recover took, and returns how many
// sandboxes it reattached.
func reattachTime(ctx context.Context, o Options, row *Row, progress func(string, ...any)) (int, error) {
	dir, err := os.MkdirTemp("", "airlock-bench-restart-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	newSup := func() (*supervisor.Supervisor, error) {
		d, err := native.New(native.Options{Persistent: true})
		if err != nil {
			return nil, err
		}
		if err := d.Probe(ctx); err != nil {
			return nil, err
		}
		// Admission would refuse long before the bench's count: it reserves
		// each sandbox's limits, which idle sandboxes never use. The bench
		// guards the host's free memory itself (guard below).
		return supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": d},
			MemAvailable: func() (int64, error) { return 1 << 50, nil }})
	}
	sup, err := newSup()
	if err != nil {
		return 0, err
	}
	guard, err := newMemGuard(readMemInfo)
	if err != nil {
		return 0, err
	}
	want := o.Density
	c := supervisor.Caller{KeyID: "bench", Quota: store.Quota{MaxSandboxes: want, MaxMemoryBytes: 1 << 50}, Operator: true,
		Rate: store.RateLimits{CreatesPerSecond: 1e6, CreateBurst: 1e6}}
	progress("restart: make %d sandboxes", want)
	var ids []string
	for len(ids) < want {
		if len(ids)%10 == 0 {
			if k, _, err := guard.allow(1); err != nil || k == 0 {
				row.Detail = fmt.Sprintf("stopped at %d sandboxes: the host's free memory is short", len(ids))
				break
			}
		}
		in, err := sup.Create(ctx, c, supervisor.CreateRequest{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
		if err != nil {
			_ = sup.Close(context.WithoutCancel(ctx))
			return len(ids), fmt.Errorf("create sandbox %d: %w", len(ids)+1, err)
		}
		ids = append(ids, in.ID)
	}
	// The daemon stops: its sandboxes run on.
	if err := sup.Detach(ctx); err != nil {
		return len(ids), err
	}
	sup2, err := newSup()
	if err != nil {
		return len(ids), err
	}
	defer sup2.Close(context.WithoutCancel(ctx))
	progress("restart: reattach %d sandboxes", len(ids))
	start := time.Now()
	rep, err := sup2.Recover(ctx)
	took := time.Since(start)
	if err != nil {
		return len(ids), err
	}
	if len(rep.Reattached) != len(ids) {
		return len(ids), fmt.Errorf("reattached %d of %d sandboxes (lost %d)", len(rep.Reattached), len(ids), len(rep.Lost))
	}
	row.Status, row.Value = StatusOK, ptr(float64(took.Microseconds())/1000)
	return len(ids), nil
}
