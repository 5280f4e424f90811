package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// liveSpec is the sandbox the exec and throughput tests run in: room for
// 16 concurrent commands and the CPU quota of the whole machine, so that
// the sandbox's limits do not cap what is measured, as the baselines have
// no limits either.
func liveSpec() sandbox.Spec {
	return sandbox.Spec{Limits: sandbox.Limits{
		Pids:     256,
		CPUs:     float64(runtime.NumCPU()),
		Lifetime: time.Hour,
	}}
}

// execHang is how long an exec of /bin/true may take before the bench
// gives up on it and on its sandbox: longer than the exec's own 10 s
// timeout and the driver's backstop, so only a sandbox that hangs hits it.
const execHang = 15 * time.Second

// guarded is a sandbox whose calls the bench abandons when they hang, so
// that one stuck sandbox fails its rows instead of the whole run.
type guarded struct {
	sb sandbox.Instance
	// hang is how long an exec may take; zero means execHang.
	hang time.Duration
	hung atomic.Bool
}

// errHung is what calls to a sandbox that hung before return.
var errHung = errors.New("the sandbox hung on an earlier exec")

// exec runs /bin/true in the sandbox and checks that it exited 0.
func (g *guarded) exec(ctx context.Context) (time.Duration, error) {
	if g.hung.Load() {
		return 0, errHung
	}
	type outcome struct {
		res sandbox.Result
		err error
	}
	done := make(chan outcome, 1)
	t0 := time.Now()
	go func() {
		res, err := sandbox.Run(ctx, g.sb, sandbox.ExecRequest{Argv: trueArgv})
		done <- outcome{res, err}
	}()
	hang := g.hang
	if hang == 0 {
		hang = execHang
	}
	timer := time.NewTimer(hang)
	defer timer.Stop()
	select {
	case o := <-done:
		d := time.Since(t0)
		if o.err != nil {
			return d, fmt.Errorf("exec /bin/true: %w", o.err)
		}
		if o.res.Reason != sandbox.ReasonExit || o.res.ExitCode != 0 {
			return d, fmt.Errorf("exec /bin/true: exit %d (%s) %s", o.res.ExitCode, o.res.Reason, o.res.Message)
		}
		return d, nil
	case <-timer.C:
		g.hung.Store(true)
		return time.Since(t0), fmt.Errorf("exec /bin/true in sandbox %s did not return within %v", g.sb.ID(), hang)
	}
}

// close closes the sandbox, giving up after 30 s.
func (g *guarded) close(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- g.sb.Close(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("close sandbox %s: no return within 30 s", g.sb.ID())
	}
}

// liveRows measures, in one live sandbox, the exec round trip (section 2)
// and the throughput of 1, 2 and 16 concurrent clients beside fork/exec
// and bwrap (section 5).
func liveRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) (execRows, tputRows []Row, err error) {
	execRow := Row{
		Section: "exec", ID: "exec/native", What: "exec /bin/true, live sandbox, in-process (native)",
		Compare: []Comparison{
			{Baseline: "start/true/" + idBwrap, Name: "bwrap start"},
			{Baseline: "start/true/" + idForkExec, Name: "fork/exec"},
		},
	}

	var sb *guarded
	// renew replaces a sandbox that hung, so that one hang fails one row
	// and not every row after it.
	renew := func() error {
		if sb != nil && !sb.hung.Load() {
			return nil
		}
		if old := sb; old != nil {
			go func() { _ = old.close(ctx) }() // a hung sandbox may take long to close, or never
		}
		progress("exec: create a sandbox")
		in, err := drv.Create(ctx, liveSpec())
		if err != nil {
			return err
		}
		sb = &guarded{sb: in}
		return nil
	}
	defer func() {
		if sb != nil {
			_ = sb.close(ctx)
		}
	}()
	if drvErr == nil {
		drvErr = renew()
	}
	if drvErr != nil {
		execRow.Status, execRow.Detail, execRow.Unit = StatusFailed, drvErr.Error(), UnitMS
	} else {
		progress("exec: %d execs in one sandbox", o.TrueRuns)
		s, err := timeRuns(ctx, o.TrueRuns, max(5, warmups(o.TrueRuns)), o.RowTime, sb.exec)
		if err != nil {
			return nil, nil, err
		}
		execRow = latencyRow(execRow, s)
	}
	httpRow := Row{Section: "exec", ID: "exec/http", What: "exec /bin/true over the HTTP API (native)", Unit: UnitMS,
		Status: StatusFailed, Detail: "no native driver"}
	if drvErr == nil {
		httpRow = httpExecRow(ctx, o, drv, progress)
	}
	execRows = []Row{execRow, httpRow}

	bwrap, bwrapStatus, bwrapDetail := resolve(launcher{prefix: bwrapArgs, fix: fixBwrap})
	for _, c := range o.Clients {
		what := fmt.Sprintf("%d client", c)
		if c > 1 {
			what += "s"
		}
		id := func(l string) string { return fmt.Sprintf("throughput/%s-c%d", l, c) }

		fe := Row{Section: "throughput", ID: id(idForkExec), What: "fork/exec /bin/true, " + what}
		progress("throughput: fork/exec, %s", what)
		r, err := measureRate(ctx, c, o.ThroughputTime, cmdProbe(trueArgv, o.runTimeout()))
		if err != nil {
			return nil, nil, err
		}
		tputRows = append(tputRows, rateRow(fe, r))

		bw := Row{Section: "throughput", ID: id(idBwrap), What: "bwrap /bin/true, " + what, Unit: UnitRate,
			Compare: []Comparison{{Baseline: id(idForkExec), Name: "fork/exec"}}}
		if bwrapStatus != StatusOK {
			bw.Status, bw.Detail = bwrapStatus, bwrapDetail
		} else {
			progress("throughput: bwrap, %s", what)
			r, err := measureRate(ctx, c, o.ThroughputTime, cmdProbe(append(bwrap, trueArgv...), o.runTimeout()))
			if err != nil {
				return nil, nil, err
			}
			bw = rateRow(bw, r)
		}
		tputRows = append(tputRows, bw)

		al := Row{Section: "throughput", ID: id(idAirlockNative), What: "airlock exec /bin/true, one sandbox, " + what, Unit: UnitRate,
			Compare: []Comparison{{Baseline: id(idBwrap), Name: "bwrap"}, {Baseline: id(idForkExec), Name: "fork/exec"}}}
		if drvErr == nil {
			drvErr = renew()
		}
		if drvErr != nil {
			al.Status, al.Detail = StatusFailed, drvErr.Error()
		} else {
			progress("throughput: airlock, %s", what)
			r, err := measureRate(ctx, c, o.ThroughputTime, func() (probe, func(), error) { return sb.exec, func() {}, nil })
			if err != nil {
				return nil, nil, err
			}
			al = rateRow(al, r)
		}
		tputRows = append(tputRows, al)
	}
	return execRows, tputRows, nil
}
