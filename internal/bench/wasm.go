package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Row ids of the wasm driver.
const (
	idWasmInstantiate = "wasm/instantiate"
	idWasmPython      = "wasm/python"
	idWasmPythonWarm  = "wasm/python-warm"
)

// warmPause is how long the warm row waits before each run: longer than a
// python3's start-up, so that the sandbox's warm python3 is ready, as it
// is when an agent's commands come seconds apart.
const warmPause = 400 * time.Millisecond

// wasmRows times the wasm driver in one sandbox: an exec of a cached
// module whose _start is empty (the cost of an instantiate), python3 -c
// 'print(1)' (beside python on native and on bare fork/exec), and the
// python runs per second that clients get in one sandbox.
func wasmRows(ctx context.Context, o Options, progress func(string, ...any)) ([]Row, []Row, error) {
	inst := Row{Section: "wasm", ID: idWasmInstantiate, What: "wasm: exec of a cached module with an empty _start (instantiate)", Unit: UnitMS}
	py := Row{Section: "wasm", ID: idWasmPython, What: "wasm: python3 -c 'print(1)' in one sandbox, back to back (each on a python3 still starting)", Unit: UnitMS,
		Compare: []Comparison{
			{Baseline: "start/python/" + idAirlockNative, Name: "airlock native"},
			{Baseline: "start/python/" + idForkExec, Name: "fork/exec"},
		}}
	warm := Row{Section: "wasm", ID: idWasmPythonWarm, What: "wasm: python3 -c 'print(1)' on the sandbox's warm python3, 400 ms after the last (target ≤ 20 ms)", Unit: UnitMS,
		Compare: []Comparison{
			{Baseline: "start/python/" + idForkExec, Name: "fork/exec"},
		}}
	var tput []Row
	fail := func(detail string) ([]Row, []Row, error) {
		inst.Status, inst.Detail, py.Status, py.Detail = StatusFailed, detail, StatusFailed, detail
		warm.Status, warm.Detail = StatusFailed, detail
		for _, c := range o.Clients {
			tput = append(tput, Row{Section: "throughput", ID: fmt.Sprintf("throughput/wasm-python-c%d", c), Unit: UnitRate,
				What: fmt.Sprintf("wasm python3 print(1), one sandbox, %d clients", c), Status: StatusFailed, Detail: detail})
		}
		return []Row{inst, py, warm}, tput, nil
	}
	dir, err := os.MkdirTemp("", "airlock-bench-wasm-")
	if err != nil {
		return fail(err.Error())
	}
	defer os.RemoveAll(dir)
	empty := filepath.Join(dir, "empty.wasm")
	if err := os.WriteFile(empty, wasm.EmptyCommand(), 0o644); err != nil {
		return fail(err.Error())
	}
	d, err := wasm.New(wasm.Options{})
	if err == nil {
		err = d.Probe(ctx)
	}
	if err != nil {
		return fail(err.Error())
	}
	progress("wasm: create a sandbox (compiles python.wasm unless it is cached)")
	sb, err := d.Create(ctx, sandbox.Spec{Module: empty})
	if err != nil {
		return fail(err.Error())
	}
	defer sb.Close(context.WithoutCancel(ctx))
	run := func(argv ...string) probe {
		return func(ctx context.Context) (time.Duration, error) {
			start := time.Now()
			res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: argv, Stdout: io.Discard, Stderr: io.Discard})
			if err == nil && (res.ExitCode != 0 || res.Reason != sandbox.ReasonExit) {
				err = fmt.Errorf("%v: exit %d, %s: %s", argv, res.ExitCode, res.Reason, res.Message)
			}
			return time.Since(start), err
		}
	}
	progress("wasm: %d instantiates of an empty module", o.TrueRuns)
	s, err := timeRuns(ctx, o.TrueRuns, warmups(o.TrueRuns), o.RowTime, run("empty"))
	if err != nil {
		return nil, nil, err
	}
	inst = latencyRow(inst, s)
	pyRun := run("python3", "-c", "print(1)")
	if perr := d.Python(ctx); perr != nil {
		py.Status, py.Detail = StatusMissing, perr.Error()
	} else {
		progress("wasm: %d python3 print(1)", o.PythonRuns)
		s, err := timeRuns(ctx, o.PythonRuns, warmups(o.PythonRuns), o.RowTime, pyRun)
		if err != nil {
			return nil, nil, err
		}
		py = latencyRow(py, s)
		progress("wasm: %d python3 print(1) on a warm python3", o.PythonRuns)
		s, err = timeRuns(ctx, o.PythonRuns, warmups(o.PythonRuns), o.RowTime, func(ctx context.Context) (time.Duration, error) {
			select {
			case <-time.After(warmPause):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return pyRun(ctx)
		})
		if err != nil {
			return nil, nil, err
		}
		warm = latencyRow(warm, s)
	}
	if py.Status != StatusOK {
		warm.Status, warm.Detail = py.Status, py.Detail
	}
	for _, c := range o.Clients {
		row := Row{Section: "throughput", ID: fmt.Sprintf("throughput/wasm-python-c%d", c), Unit: UnitRate,
			What: fmt.Sprintf("wasm python3 print(1), one sandbox, %d clients", c)}
		if py.Status != StatusOK {
			row.Status, row.Detail = py.Status, py.Detail
		} else {
			progress("throughput: wasm python, %d clients", c)
			r, err := measureRate(ctx, c, o.ThroughputTime, func() (probe, func(), error) { return pyRun, func() {}, nil })
			if err != nil {
				return nil, nil, err
			}
			row = rateRow(row, r)
		}
		tput = append(tput, row)
	}
	return []Row{inst, py, warm}, tput, nil
}
