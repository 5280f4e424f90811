package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/microvm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// microvmLimits are the limits of the microVM rows' sandboxes: a 256 MiB
// guest with one vCPU, as the driver's tests use.
var microvmLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 256, Lifetime: time.Hour}

// bareBoot returns the command line of a bare QEMU boot of the microvm
// driver's guest, to its init and out, or why there is none.
func bareBoot(ctx context.Context) ([]string, string) {
	d, err := microvm.New(microvm.Options{})
	if err != nil {
		return nil, err.Error()
	}
	argv, err := d.BareBoot(ctx, microvmLimits)
	if err != nil {
		return nil, err.Error()
	}
	return argv, ""
}

// microvmIdleSandboxes is how many idle microVMs the memory row starts.
func (o Options) microvmIdleSandboxes() int {
	if o.Quick {
		return 3
	}
	return 8
}

// microvmRows measures the microvm driver in-process: a cold boot and a
// start from a snapshot, each to the first command's exit, beside the bare
// boot of the same guest; the exec round trip in a live microVM; and the
// host memory of an idle one.
func microvmRows(ctx context.Context, o Options, progress func(string, ...any)) ([]Row, error) {
	bare := "start/true/" + idQEMU
	cold := Row{Section: "microvm", ID: "microvm/cold", Unit: UnitMS,
		What:    "microvm cold boot to the first command's exit (create + exec /bin/true, in-process)",
		Compare: []Comparison{{Baseline: bare, Name: "bare boot"}}}
	snap := Row{Section: "microvm", ID: "microvm/snapshot", Unit: UnitMS,
		What:    "microvm from a snapshot to the first command's exit (create + exec /bin/true, in-process)",
		Compare: []Comparison{{Baseline: "microvm/cold", Name: "cold"}, {Baseline: bare, Name: "bare boot"}}}
	execR := Row{Section: "microvm", ID: "microvm/exec", Unit: UnitMS,
		What:    "exec /bin/true, live microVM, in-process",
		Compare: []Comparison{{Baseline: "exec/native", Name: "native"}}}
	mem := Row{Section: "microvm", ID: "microvm/idle-pss", Unit: UnitMiB,
		What: fmt.Sprintf("idle microVM (256 MiB guest): host PSS of QEMU, its share of the snapshot's pages included, mean of %d", o.microvmIdleSandboxes())}
	rows := []*Row{&cold, &snap, &execR, &mem}
	fail := func(why string) []Row {
		out := make([]Row, len(rows))
		for i, r := range rows {
			r.Status, r.Detail = StatusFailed, why
			out[i] = *r
		}
		for _, id := range microvmPauseRowIDs() {
			out = append(out, Row{Section: "microvm", ID: id, What: "microvm " + strings.TrimPrefix(id, "microvm/"), Status: StatusFailed, Detail: why})
		}
		return out
	}

	warm, err := microvm.New(microvm.Options{})
	if err == nil {
		err = warm.Probe(ctx)
	}
	if err != nil {
		return fail(err.Error()), nil
	}
	coldD, err := microvm.New(microvm.Options{Cold: true})
	if err != nil {
		return fail(err.Error()), nil
	}
	spec := sandbox.Spec{Limits: microvmLimits}
	// startToExit creates a sandbox, runs /bin/true in it, and closes it
	// (untimed): the time to the first command's exit.
	startToExit := func(d sandbox.Driver) probe {
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			in, err := d.Create(ctx, spec)
			if err != nil {
				return time.Since(t0), err
			}
			g := &guarded{sb: in, hang: time.Minute}
			_, err = g.exec(ctx)
			d := time.Since(t0)
			if cerr := g.close(ctx); err == nil {
				err = cerr
			}
			return d, err
		}
	}

	runs := max(1, o.PythonRuns/5)
	progress("microvm: %d cold boots", runs)
	s, err := timeRuns(ctx, runs, 1, o.RowTime, startToExit(coldD))
	if err != nil {
		return nil, err
	}
	cold = latencyRow(cold, s)
	cold.Detail = joinDetail(cold.Detail, "accel "+describeAccel(coldD))

	progress("microvm: %d starts from a snapshot", o.PythonRuns)
	s, err = timeRuns(ctx, o.PythonRuns, 2, o.RowTime, startToExit(warm))
	if err != nil {
		return nil, err
	}
	snap = latencyRow(snap, s)

	progress("microvm: %d execs in one microVM", o.TrueRuns)
	if in, err := warm.Create(ctx, spec); err != nil {
		execR.Status, execR.Detail = StatusFailed, err.Error()
	} else {
		g := &guarded{sb: in, hang: time.Minute}
		s, err := timeRuns(ctx, o.TrueRuns, max(5, warmups(o.TrueRuns)), o.RowTime, g.exec)
		_ = g.close(ctx)
		if err != nil {
			return nil, err
		}
		execR = latencyRow(execR, s)
	}

	progress("microvm: memory of %d idle microVMs", o.microvmIdleSandboxes())
	mem = idleMicroVMs(ctx, o, warm, spec, mem)
	return append([]Row{cold, snap, execR, mem}, microvmPauseRows(ctx, o, warm, progress)...), nil
}

// idleMicroVMs starts idle microVMs and reads the PSS of what each has in
// its host cgroup (QEMU).
func idleMicroVMs(ctx context.Context, o Options, d *microvm.Driver, spec sandbox.Spec, row Row) Row {
	h, err := cgroup.Detect()
	if err != nil {
		row.Status, row.Detail = StatusFailed, err.Error()
		return row
	}
	var live []*guarded
	defer func() {
		for _, g := range live {
			_ = g.close(ctx)
		}
	}()
	for range o.microvmIdleSandboxes() {
		in, err := d.Create(ctx, spec)
		if err != nil {
			row.Status, row.Detail = StatusFailed, err.Error()
			return row
		}
		g := &guarded{sb: in, hang: time.Minute}
		live = append(live, g)
		// A command has run, as in a sandbox in use.
		if _, err := g.exec(ctx); err != nil {
			row.Status, row.Detail = StatusFailed, err.Error()
			return row
		}
	}
	select {
	case <-ctx.Done():
		return row
	case <-time.After(o.Settle + time.Second):
	}
	var total uint64
	for _, g := range live {
		procs, err := h.Open(cgroupParent + "/" + g.sb.ID()).Procs()
		if err != nil || len(procs) == 0 {
			row.Status, row.Detail = StatusFailed, fmt.Sprintf("read the processes of sandbox %s: %v", g.sb.ID(), err)
			return row
		}
		pss, err := pssOf("/proc", procs)
		if err != nil {
			row.Status, row.Detail = StatusFailed, err.Error()
			return row
		}
		total += pss
	}
	n := float64(len(live))
	row.Status, row.Value = StatusOK, ptr(mib(float64(total)/n))
	shared := float64(d.SnapshotMemory())
	row.Detail = fmt.Sprintf("the snapshot's RAM, held once by airlock: %.1f MiB (%.1f MiB a sandbox with %d)", mib(shared), mib(shared/n), len(live))
	return row
}

// describeAccel says which accelerator a driver's machines use.
func describeAccel(d *microvm.Driver) string {
	s := d.Describe()
	if i := strings.Index(s, "accel "); i >= 0 {
		s = s[i+len("accel "):]
		if j := strings.IndexAny(s, ", "); j >= 0 {
			s = s[:j]
		}
	}
	return s
}

// joinDetail adds b to a row's detail a.
func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
