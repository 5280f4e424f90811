package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// cgroupParent is where the native driver puts its sandboxes' cgroups
// (its default).
const cgroupParent = "airlock"

// DensitySteps returns the sandbox counts the density test grows through
// on its way to n: a tenth, a quarter, half, all of it.
func DensitySteps(n int) []int {
	var steps []int
	for _, s := range []int{n / 10, n / 4, n / 2, n} {
		if s > 0 && !slices.Contains(steps, s) {
			steps = append(steps, s)
		}
	}
	return steps
}

// memGuard keeps the density test within the host's free memory.
type memGuard struct {
	// reserve is the memory, in bytes, left free whatever happens.
	reserve uint64
	// per is the memory one more sandbox is expected to take, in bytes.
	per  float64
	read func() (MemInfo, error)
}

// newMemGuard leaves a tenth of the host's memory, at least 512 MiB,
// free, and expects 32 MiB per sandbox until one is measured.
func newMemGuard(read func() (MemInfo, error)) (*memGuard, error) {
	mi, err := read()
	if err != nil {
		return nil, err
	}
	return &memGuard{reserve: max(mi.Total/10, 512<<20), per: 32 << 20, read: read}, nil
}

// allow returns how many of want more sandboxes free memory allows, and
// MemAvailable.
func (g *memGuard) allow(want int) (int, uint64, error) {
	mi, err := g.read()
	if err != nil {
		return 0, 0, err
	}
	if mi.Available <= g.reserve {
		return 0, mi.Available, nil
	}
	n := int(float64(mi.Available-g.reserve) / g.per)
	return max(0, min(n, want)), mi.Available, nil
}

// learn sets the expected memory per sandbox from a measurement, with a
// margin of two, or from what the host's MemAvailable fell by per
// sandbox over the last step (marginal), with a margin of a half: the
// kernel's share of a sandbox grows with the number of sandboxes (decision
// 81), so the last step's is the best guess for the next.
func (g *memGuard) learn(perSandbox, marginal float64) {
	g.per = max(2*perSandbox, 1.5*marginal, 4<<20)
}

// createBase is the live count the density test times creates at
// first: the cost of a create before the host holds many sandboxes.
const createBase = 10

// createBase is createBase, or the first step's count when that is
// fewer.
func (o Options) createBase() int {
	if steps := o.densitySteps(); len(steps) > 0 {
		return min(createBase, steps[0])
	}
	return createBase
}

// createCycles is how many creates (each closed again) are timed at
// createBase and at each step.
const createCycles = 20

// densityRun is what the density test saw.
type densityRun struct {
	steps  []DensityStep
	create []time.Duration
	// createBase are creates timed with Options.createBase sandboxes
	// live.
	createBase series
	close      []time.Duration
	stopped    string // why growth stopped short of the last step
	limits     string // what the test changed of this process's limits
	err        error  // why nothing could be measured
	memErr     error  // why memory could not be read
}

// runDensity starts idle sandboxes in steps, measures memory and exec
// latency at each, then closes them all.
func runDensity(ctx context.Context, o Options, drv sandbox.Driver, h *cgroup.Hierarchy, progress func(string, ...any)) (dr densityRun, err error) {
	guard, gerr := newMemGuard(readMemInfo)
	if gerr != nil {
		dr.err = gerr
		return dr, nil
	}
	// What the host had before the first sandbox, and at the last step.
	start, gerr := readMemInfo()
	if gerr != nil {
		dr.err = gerr
		return dr, nil
	}
	last, lastLive := start, 0
	tasks := newTaskGuard()
	if steps := o.densitySteps(); len(steps) > 0 {
		n := steps[len(steps)-1]
		dr.limits = strings.Join(slices.DeleteFunc([]string{raiseOpenFiles(n), tasks.forecast(n)}, func(s string) bool { return s == "" }), "; ")
	}
	var live []*guarded
	defer func() {
		// Close whatever is left when the test ends early.
		for _, sb := range live {
			_ = sb.close(ctx)
		}
	}()
	spec := sandbox.Spec{Limits: sandbox.Limits{Lifetime: time.Hour}}
	// Creates are timed once with few sandboxes live, on the way up.
	baseTimed := false
	timeBase := func() error {
		if baseTimed || len(live) != o.createBase() {
			return nil
		}
		baseTimed = true
		progress("density: time %d creates with %d live", createCycles, len(live))
		var err error
		dr.createBase, err = timeCreates(ctx, drv, spec)
		return err
	}

	for _, target := range o.densitySteps() {
		allowed, avail, err := guard.allow(target - len(live))
		if err != nil {
			dr.stopped = err.Error()
			break
		}
		if len(live)+allowed < target {
			dr.stopped = fmt.Sprintf("stopped at %d of %d sandboxes: MemAvailable %.0f MiB, keeping %.0f MiB free, at %.1f MiB per sandbox",
				len(live)+allowed, target, mib(float64(avail)), mib(float64(guard.reserve)), mib(guard.per))
			target = len(live) + allowed
		}
		progress("density: grow to %d sandboxes", target)
		for len(live) < target {
			if err := timeBase(); err != nil {
				return dr, err
			}
			if len(live)%10 == 0 {
				if why := tasks.check(len(live)); why != "" {
					dr.stopped = why
					break
				}
				if n, avail, err := guard.allow(1); err != nil || n == 0 {
					dr.stopped = fmt.Sprintf("stopped at %d sandboxes: MemAvailable %.0f MiB is near the %.0f MiB kept free",
						len(live), mib(float64(avail)), mib(float64(guard.reserve)))
					break
				}
			}
			t0 := time.Now()
			sb, err := drv.Create(ctx, spec)
			if ctx.Err() != nil {
				return dr, ctx.Err()
			}
			if err != nil {
				if len(live) == 0 {
					dr.err = err
					return dr, nil
				}
				dr.stopped = fmt.Sprintf("stopped at %d sandboxes: create failed: %v", len(live), err)
				break
			}
			dr.create = append(dr.create, time.Since(t0))
			live = append(live, &guarded{sb: sb})
		}
		if err := timeBase(); err != nil {
			return dr, err
		}
		if n := len(dr.steps); len(live) == 0 || (n > 0 && dr.steps[n-1].Sandboxes == len(live)) {
			break // nothing new to measure
		}
		// The host's memory is read as the step's sandboxes have come up,
		// before this step's execs and creates add groups of their own.
		var hostBytes, kernelBytes, marginal float64
		if mi, err := readMemInfo(); err == nil && mi.Available > 0 {
			if start.Available > mi.Available {
				hostBytes = float64(start.Available-mi.Available) / float64(len(live))
			}
			if start.Unreclaim > 0 && mi.Unreclaim > start.Unreclaim {
				kernelBytes = float64(mi.Unreclaim-start.Unreclaim) / float64(len(live))
			}
			if last.Available > mi.Available && len(live) > lastLive {
				marginal = float64(last.Available-mi.Available) / float64(len(live)-lastLive)
			}
			last, lastLive = mi, len(live)
		}
		step, memErr, err := measureStep(ctx, o, h, live, func() string {
			if n, avail, err := guard.allow(1); err == nil && n == 0 {
				return fmt.Sprintf("MemAvailable %.0f MiB is near the %.0f MiB kept free", mib(float64(avail)), mib(float64(guard.reserve)))
			}
			return ""
		})
		if err != nil {
			return dr, err
		}
		if step.ExecStopped != "" && dr.stopped == "" {
			dr.stopped = step.ExecStopped
		}
		step.HostBytes, step.KernelBytes = hostBytes, kernelBytes
		cs := dr.createBase
		if len(live) != o.createBase() {
			progress("density: time %d creates with %d live", createCycles, len(live))
			if cs, err = timeCreates(ctx, drv, spec); err != nil {
				return dr, err
			}
		}
		if len(cs.samples) > 0 {
			step.Create = SummarizeDurations(cs.samples)
		}
		step.CreateFailures = cs.fails
		if memErr != nil && dr.memErr == nil {
			dr.memErr = memErr
		}
		if step.PSSBytes > 0 || step.CgroupBytes > 0 || marginal > 0 {
			guard.learn(max(step.PSSBytes, step.CgroupBytes), marginal)
		}
		tasks.learn(step.Tasks)
		dr.steps = append(dr.steps, step)
		if dr.stopped != "" {
			break
		}
	}
	progress("density: close %d sandboxes", len(live))
	for len(live) > 0 {
		t0 := time.Now()
		_ = live[0].close(ctx)
		dr.close = append(dr.close, time.Since(t0))
		live = live[1:]
	}
	return dr, nil
}

// timeCreates times createCycles creates of spec, each closed again
// before the next, so that every one is made with the same sandboxes
// live. It fails only when ctx ends.
func timeCreates(ctx context.Context, drv sandbox.Driver, spec sandbox.Spec) (series, error) {
	var s series
	for range createCycles {
		t0 := time.Now()
		sb, err := drv.Create(ctx, spec)
		d := time.Since(t0)
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if err != nil {
			s.fails++
			if s.firstErr == nil {
				s.firstErr = err
			}
			continue
		}
		s.samples = append(s.samples, d)
		_ = sb.Close(ctx)
	}
	return s, nil
}

// measureStep reads the memory of the idle sandboxes live, then times
// execs of /bin/true spread round-robin over them. It fails only when ctx
// ends; memErr says why memory could not be read.
func measureStep(ctx context.Context, o Options, h *cgroup.Hierarchy, live []*guarded, low func() string) (step DensityStep, memErr, err error) {
	step = DensityStep{Sandboxes: len(live)}
	time.Sleep(o.Settle)
	if h != nil {
		var pss, cg, tasks uint64
		for _, sb := range live {
			p, c, k, err := sandboxMemory(h, sb.sb.ID())
			if err != nil {
				memErr = err
				break
			}
			pss += p
			cg += c
			tasks += k
		}
		if memErr == nil {
			step.PSSBytes = float64(pss) / float64(len(live))
			step.CgroupBytes = float64(cg) / float64(len(live))
			step.Tasks = float64(tasks) / float64(len(live))
		}
	}
	// One untimed exec in every sandbox not used yet, so that the timed
	// ones measure load and not a sandbox's first exec.
	// Each exec leaves a cgroup the kernel frees late, and with thousands
	// of sandboxes each costs the kernel hundreds of KiB (decision 81):
	// the execs stop, saying so, before the host's free memory does.
	stop := func(i, n int, what string) bool {
		if i%20 != 0 {
			return false
		}
		if why := low(); why != "" {
			step.ExecStopped = fmt.Sprintf("stopped the %s at %d of %d: %s", what, i, n, why)
			return true
		}
		return false
	}
	for i, sb := range live {
		if stop(i, len(live), "untimed first execs") {
			return step, memErr, nil
		}
		if _, err := sb.exec(ctx); ctx.Err() != nil {
			return step, memErr, ctx.Err()
		} else if err != nil {
			step.ExecFailures++
		}
	}
	n := max(o.TrueRuns, len(live))
	var ds []time.Duration
	for i := 0; i < n; i++ {
		if stop(i, n, "timed execs") {
			break
		}
		d, err := live[i%len(live)].exec(ctx)
		if ctx.Err() != nil {
			return step, memErr, ctx.Err()
		}
		if err != nil {
			step.ExecFailures++
			continue
		}
		ds = append(ds, d)
	}
	step.Exec = SummarizeDurations(ds)
	return step, memErr, nil
}

// sandboxMemory returns the summed PSS of the processes in a native
// sandbox's cgroups, the memory its memory cgroup charges, and how many
// kernel tasks (threads) its processes have.
func sandboxMemory(h *cgroup.Hierarchy, id string) (pss, cg, tasks uint64, err error) {
	g := h.Open(cgroupParent + "/" + id)
	pids, err := g.Procs()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("list processes of sandbox %s: %w", id, err)
	}
	if len(pids) == 0 {
		return 0, 0, 0, fmt.Errorf("sandbox %s: no process in its cgroup %s", id, g.Path("pids"))
	}
	if pss, err = pssOf("/proc", pids); err != nil {
		return 0, 0, 0, err
	}
	if cg, err = cgroupMemory(g.Path("memory"), h.V2); err != nil {
		return 0, 0, 0, fmt.Errorf("sandbox %s: %w", id, err)
	}
	// On cgroup v1 a process is listed in every group one of its threads
	// is in (the agent's spare spawner thread waits in an exec group):
	// each process's threads count once.
	slices.Sort(pids)
	for _, p := range slices.Compact(pids) {
		if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p)); err == nil {
			tasks += uint64(len(ents))
		}
	}
	return pss, cg, tasks, nil
}

// idleMemory is the memory per instance of an idle baseline.
type idleMemory struct {
	pss, cg float64 // bytes per instance
	err     error
}

// idleBaseline starts k instances of argv (a command that sleeps) in a
// memory cgroup of their own and returns their memory per instance: the
// summed PSS of their processes and what the cgroup charges. Each starts
// as a shell that moves itself into the cgroup and then execs argv, so
// everything argv allocates is charged there.
func idleBaseline(ctx context.Context, o Options, h *cgroup.Hierarchy, name string, argv []string, k int) idleMemory {
	parent := h.Open(fmt.Sprintf("airlock-bench-%d", os.Getpid()))
	g := parent.Child(name)
	if err := g.Create(); err != nil {
		return idleMemory{err: err}
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		_ = g.Kill(5 * time.Second)
		_ = parent.Remove()
	}()
	script := `echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"`
	memProcs := filepath.Join(g.Path("memory"), "cgroup.procs")
	pidsProcs := filepath.Join(g.Path("pids"), "cgroup.procs")
	for i := 0; i < k; i++ {
		c := exec.Command("/bin/sh", append([]string{"-c", script, "sh", memProcs, pidsProcs}, argv...)...)
		if err := c.Start(); err != nil {
			return idleMemory{err: fmt.Errorf("start %s: %w", argv[0], err)}
		}
		cmds = append(cmds, c)
	}
	// Up when k sleeping processes are in the group.
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids, err := g.Procs()
		if err != nil {
			return idleMemory{err: err}
		}
		if countComm(pids, "sleep") >= k {
			break
		}
		if ctx.Err() != nil {
			return idleMemory{err: ctx.Err()}
		}
		if time.Now().After(deadline) {
			return idleMemory{err: fmt.Errorf("%d of %d %s did not come up within 15 s", k-countComm(pids, "sleep"), k, name)}
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(o.Settle)
	pids, err := g.Procs()
	if err != nil {
		return idleMemory{err: err}
	}
	pss, err := pssOf("/proc", pids)
	if err != nil {
		return idleMemory{err: err}
	}
	cg, err := cgroupMemory(g.Path("memory"), h.V2)
	if err != nil {
		return idleMemory{err: err}
	}
	return idleMemory{pss: float64(pss) / float64(k), cg: float64(cg) / float64(k)}
}

// countComm counts the processes among pids whose command name is comm.
func countComm(pids []int, comm string) int {
	n := 0
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			n++
		}
	}
	return n
}

// densityRows measures density (section 3): idle sandboxes' memory beside
// idle bwrap sandboxes and plain processes, exec latency as the number of
// sandboxes grows, and the cost of closing them.
func densityRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) ([]Row, []DensityStep, []string, error) {
	h, herr := cgroup.Detect()
	var dr densityRun
	if drvErr != nil {
		dr.err = drvErr
	} else {
		var err error
		if dr, err = runDensity(ctx, o, drv, h, progress); err != nil {
			return nil, nil, nil, err
		}
	}
	var notes []string
	if dr.limits != "" {
		notes = append(notes, "density: "+dr.limits)
	}
	if dr.stopped != "" {
		notes = append(notes, "density: "+dr.stopped)
	}

	row := func(id, what, unit string) Row {
		return Row{Section: "density", ID: "density/" + id, What: what, Unit: unit}
	}
	failed := func(r Row, err error) Row {
		r.Status, r.Detail = StatusFailed, err.Error()
		return r
	}
	var rows []Row

	create := row("create", "create an idle sandbox (in-process, native)", UnitMS)
	if dr.err != nil {
		create = failed(create, dr.err)
	} else {
		create = latencyRow(create, series{samples: dr.create})
	}
	rows = append(rows, create)

	// Creates at a count: each closed again, so that all of them are made
	// with the same sandboxes live.
	baseAt := o.createBase()
	base := row(fmt.Sprintf("create-at-%d", baseAt), fmt.Sprintf("create with %s live (each closed again)", sandboxes(baseAt)), UnitMS)
	switch {
	case dr.err != nil:
		base = failed(base, dr.err)
	case dr.createBase.samples == nil && dr.createBase.firstErr == nil:
		base.Status, base.Detail = StatusSkipped, dr.stopped
	default:
		base = latencyRow(base, dr.createBase)
	}
	rows = append(rows, base)
	for i, n := range o.densitySteps() {
		if n == baseAt {
			continue
		}
		r := row(fmt.Sprintf("create-at-%d", n), fmt.Sprintf("create with %s live (each closed again)", sandboxes(n)), UnitMS)
		r.Compare = []Comparison{{Baseline: base.ID, Name: sandboxes(baseAt) + " live"}}
		switch {
		case dr.err != nil:
			r = failed(r, dr.err)
		case i >= len(dr.steps):
			r.Status, r.Detail = StatusSkipped, dr.stopped
		default:
			st := dr.steps[i]
			if st.Sandboxes != n {
				r.What = fmt.Sprintf("create with %s live (of %d; each closed again)", sandboxes(st.Sandboxes), n)
			}
			if st.Create.N == 0 {
				r.Status, r.Detail = StatusFailed, fmt.Sprintf("all %d creates failed", st.CreateFailures)
			} else {
				r.Status, r.Stats, r.Failures = StatusOK, ptr(st.Create), st.CreateFailures
			}
		}
		rows = append(rows, r)
	}

	last := 0 // sandboxes of the last measured step
	for i, n := range o.densitySteps() {
		r := row(fmt.Sprintf("exec-%d", n), "exec /bin/true round-robin over "+sandboxes(n), UnitMS)
		r.Compare = []Comparison{{Baseline: "exec/native", Name: "1 sandbox"}}
		switch {
		case dr.err != nil:
			r = failed(r, dr.err)
		case i >= len(dr.steps):
			r.Status, r.Detail = StatusSkipped, dr.stopped
		default:
			st := dr.steps[i]
			if st.Sandboxes != n {
				r.What = fmt.Sprintf("exec /bin/true round-robin over %s (of %d)", sandboxes(st.Sandboxes), n)
				r.Detail = dr.stopped
			}
			switch {
			case st.Exec.N == 0 && st.ExecStopped != "":
				r.Status, r.Detail = StatusSkipped, st.ExecStopped
			case st.Exec.N == 0:
				r.Status, r.Detail = StatusFailed, fmt.Sprintf("all %d execs failed", st.ExecFailures)
			default:
				r.Status, r.Stats, r.Failures = StatusOK, ptr(st.Exec), st.ExecFailures
				if st.ExecStopped != "" {
					r.Detail = st.ExecStopped
				}
			}
			last = st.Sandboxes
		}
		rows = append(rows, r)
	}

	bend := row("bend", "exec p99 bends at (> 2x the first step's)", UnitSandboxes)
	switch {
	case dr.err != nil:
		bend = failed(bend, dr.err)
	case len(dr.steps) == 0:
		bend.Status, bend.Detail = StatusSkipped, dr.stopped
	default:
		bend.Status = StatusOK
		if at := BendAt(dr.steps); at > 0 {
			bend.Value = ptr(float64(at))
		} else {
			bend.Detail = "no bend up to " + sandboxes(last)
		}
	}
	rows = append(rows, bend)

	// Idle baselines: at most 20, as their memory per instance hardly
	// depends on how many there are.
	k := min(20, max(1, o.Density))
	var bw, plain idleMemory
	switch {
	case herr != nil:
		bw.err, plain.err = herr, herr
	default:
		if bwrap, st, detail := resolve(launcher{prefix: bwrapArgs, fix: fixBwrap}); st != StatusOK {
			bw.err = &missingError{status: st, detail: detail}
		} else {
			progress("density: %d idle bwrap sandboxes", k)
			bw = idleBaseline(ctx, o, h, "bwrap", append(bwrap, "sleep", "infinity"), k)
		}
		progress("density: %d idle plain processes", k)
		plain = idleBaseline(ctx, o, h, "process", []string{"sleep", "infinity"}, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}

	var lastStep *DensityStep
	if len(dr.steps) > 0 {
		lastStep = &dr.steps[len(dr.steps)-1]
	}
	memRow := func(id, what string, v func(DensityStep) float64, base string) Row {
		r := row(id, fmt.Sprintf("%s (%d)", what, last), UnitMiB)
		r.Compare = []Comparison{
			{Baseline: "density/" + base + "-bwrap", Name: "bwrap idle"},
			{Baseline: "density/" + base + "-process", Name: "plain process"},
		}
		switch {
		case dr.err != nil:
			return failed(r, dr.err)
		case lastStep == nil:
			r.Status, r.Detail = StatusSkipped, dr.stopped
		case herr != nil:
			return failed(r, herr)
		case dr.memErr != nil:
			return failed(r, dr.memErr)
		default:
			r.Status, r.Value = StatusOK, ptr(mib(v(*lastStep)))
		}
		return r
	}
	rows = append(rows,
		memRow("pss", "idle sandbox memory, PSS of its processes", func(s DensityStep) float64 { return s.PSSBytes }, "pss"),
		memRow("cgroup", "idle sandbox memory, its memory cgroup", func(s DensityStep) float64 { return s.CgroupBytes }, "cgroup"),
	)
	// What keeps a sandbox alive across a daemon restart is its agent:
	// its threads are the sandbox's kernel tasks at rest.
	tasks := row("tasks", fmt.Sprintf("idle sandbox kernel tasks (threads), its holder included (%d)", last), UnitTasks)
	switch {
	case dr.err != nil:
		tasks = failed(tasks, dr.err)
	case lastStep == nil:
		tasks.Status, tasks.Detail = StatusSkipped, dr.stopped
	case herr != nil:
		tasks = failed(tasks, herr)
	case dr.memErr != nil:
		tasks = failed(tasks, dr.memErr)
	default:
		tasks.Status, tasks.Value = StatusOK, ptr(lastStep.Tasks)
	}
	rows = append(rows, tasks)
	// The host's side: what MemAvailable lost and the kernel's slab grew
	// by, per sandbox, since the test began.
	hostRow := func(id, what string, v func(DensityStep) float64) Row {
		r := row(id, fmt.Sprintf("%s (%d)", what, last), UnitMiB)
		switch {
		case dr.err != nil:
			return failed(r, dr.err)
		case lastStep == nil:
			r.Status, r.Detail = StatusSkipped, dr.stopped
		case v(*lastStep) == 0:
			r.Status, r.Detail = StatusSkipped, "it did not move while the sandboxes came up: the host's other work moved it more"
		default:
			r.Status, r.Value = StatusOK, ptr(mib(v(*lastStep)))
		}
		return r
	}
	rows = append(rows,
		hostRow("host", "host memory per idle sandbox, MemAvailable's fall", func(s DensityStep) float64 { return s.HostBytes }),
		hostRow("kernel", "kernel slab per idle sandbox, SUnreclaim's growth", func(s DensityStep) float64 { return s.KernelBytes }),
	)
	baseRow := func(id, what string, m idleMemory, v float64) Row {
		r := row(id, fmt.Sprintf("%s (%d)", what, k), UnitMiB)
		var me *missingError
		switch {
		case errors.As(m.err, &me):
			r.Status, r.Detail = me.status, me.detail
		case m.err != nil:
			r = failed(r, m.err)
		default:
			r.Status, r.Value = StatusOK, ptr(mib(v))
		}
		return r
	}
	rows = append(rows,
		baseRow("pss-bwrap", "idle bwrap (sleep) memory, PSS", bw, bw.pss),
		baseRow("cgroup-bwrap", "idle bwrap (sleep) memory, cgroup", bw, bw.cg),
		baseRow("pss-process", "idle plain sleep memory, PSS", plain, plain.pss),
		baseRow("cgroup-process", "idle plain sleep memory, cgroup", plain, plain.cg),
	)

	closeRow := row("close", "close one sandbox", UnitMS)
	closeAll := row("close-all", fmt.Sprintf("close all %s, one after another", sandboxes(len(dr.close))), UnitMS)
	if dr.err != nil {
		closeRow, closeAll = failed(closeRow, dr.err), failed(closeAll, dr.err)
	} else {
		closeRow = latencyRow(closeRow, series{samples: dr.close})
		var total time.Duration
		for _, d := range dr.close {
			total += d
		}
		closeAll.Status, closeAll.Value = StatusOK, ptr(float64(total)/float64(time.Millisecond))
	}
	rows = append(rows, closeRow, closeAll)
	return rows, dr.steps, notes, nil
}

// BendAt returns the sandbox count of the first step whose exec p99 is
// more than twice the first step's, or 0 when none is.
func BendAt(steps []DensityStep) int {
	if len(steps) < 2 || steps[0].Exec.N == 0 {
		return 0
	}
	for _, s := range steps[1:] {
		if s.Exec.N > 0 && s.Exec.P99 > 2*steps[0].Exec.P99 {
			return s.Sandboxes
		}
	}
	return 0
}

// missingError carries a row status other than failed.
type missingError struct {
	status Status
	detail string
}

func (e *missingError) Error() string { return string(e.status) + ": " + e.detail }

// sandboxes says "1 sandbox" or "n sandboxes".
func sandboxes(n int) string {
	if n == 1 {
		return "1 sandbox"
	}
	return fmt.Sprintf("%d sandboxes", n)
}
