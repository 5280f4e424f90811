// Package bench measures airlock against its baselines on this machine, in
// one run, and reports every figure beside its baseline as a ratio: start
// latency of one-shot commands (plain fork/exec, unshare, bwrap, runsc,
// airlock run), the exec round trip in a live sandbox, the Docker driver
// beside the bare engine, density (memory and kernel tasks per idle
// sandbox, exec latency as their number grows), egress, snapshots
// (snapshot, incremental snapshot, restore, fork, diff), throughput with
// concurrent clients, how long a restarted daemon takes to reattach to
// its live sandboxes, and the official E2B SDKs against the daemon's E2B
// endpoints.
//
//	r, err := bench.Run(ctx, bench.Defaults(true))
//	r.WriteTable(os.Stdout)
//
// Speed claims in airlock come from this package, not from timed tests.
// Baselines that are not installed are reported as missing with the
// command that installs them, and parts of airlock that do not exist yet as
// not built: every row is always present.
package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Options say how much to measure. Defaults gives the usual values.
type Options struct {
	// Quick marks a short run for CI smoke tests; it only changes what the
	// report says, the counts below decide the run's length.
	Quick bool
	// TrueRuns is the number of timed runs of /bin/true per launcher, and
	// of execs in the exec round trip and at each density step.
	TrueRuns int
	// PythonRuns is the number of timed runs of python3 per launcher.
	PythonRuns int
	// Density is the most idle sandboxes started at once.
	Density int
	// ThroughputTime is how long each throughput level runs.
	ThroughputTime time.Duration
	// Clients are the throughput test's concurrency levels.
	Clients []int
	// RowTime bounds the timed runs of one row; a row that is not done by
	// then reports the runs it has.
	RowTime time.Duration
	// Settle is how long idle sandboxes sit before their memory is read.
	Settle time.Duration
	// Airlock is the airlock binary whose `airlock run` is timed; empty
	// reports that row as failed.
	Airlock string
	// AirlockFull is the complete airlock that the front Airlock hands
	// its other commands to; empty when Airlock is complete itself.
	AirlockFull string
	// DockerImage is the image of the docker rows, one the engine
	// (DOCKER_HOST, else the local socket) has; empty reports them as
	// missing.
	DockerImage string
	// DockerRuntime is the engine's runtime of the docker rows; empty
	// means runc.
	DockerRuntime string
	// ImageTar is a tar of a root with python3 that the image rows push
	// to a registry on loopback as a one-layer image; empty: those rows
	// are missing.
	ImageTar string
	// Progress, when not nil, receives a line per step as the run goes.
	Progress io.Writer
	// Only, when not empty, names the sections to measure (start, exec,
	// docker, microvm, density, egress, wasm, snapshots, export,
	// throughput, restart, e2b, ports); the report then has only their
	// rows.
	Only []string
	// E2BSDK is the npm project with the official E2B SDKs installed
	// (internal/api/e2b/sdktest after `npm ci`) that the e2b rows drive
	// airlock with; empty reports those rows as missing.
	E2BSDK string
}

// Defaults returns the options of a full run, or of a quick one (under a
// minute, for CI).
func Defaults(quick bool) Options {
	if quick {
		return Options{Quick: true, TrueRuns: 30, PythonRuns: 10, Density: 20, ThroughputTime: time.Second,
			Clients: []int{1, 2, 16}, RowTime: 5 * time.Second, Settle: 200 * time.Millisecond}
	}
	return Options{TrueRuns: 200, PythonRuns: 50, Density: 200, ThroughputTime: 3 * time.Second,
		Clients: []int{1, 2, 16}, RowTime: 60 * time.Second, Settle: time.Second}
}

// SetRuns sets the /bin/true runs to n and the python3 runs to a quarter of
// n, as the defaults are.
func (o *Options) SetRuns(n int) {
	o.TrueRuns = max(1, n)
	o.PythonRuns = max(1, n/4)
}

// Sections are the sections Options.Only may name.
var Sections = []string{"start", "exec", "docker", "microvm", "density", "egress", "wasm", "snapshots", "export", "throughput", "restart", "e2b", "ports", "image", "pause", "livefork"}

// want says whether any of sections is to be measured.
func (o Options) want(sections ...string) bool {
	if len(o.Only) == 0 {
		return true
	}
	for _, s := range sections {
		if slices.Contains(o.Only, s) {
			return true
		}
	}
	return false
}

func (o Options) densitySteps() []int { return DensitySteps(o.Density) }

// runTimeout bounds one run of a command.
func (o Options) runTimeout() time.Duration { return min(20*time.Second, max(o.RowTime, time.Second)) }

func (o Options) validate() error {
	switch {
	case o.TrueRuns < 1 || o.PythonRuns < 1:
		return fmt.Errorf("bench: runs must be at least 1")
	case o.Density < 1:
		return fmt.Errorf("bench: density must be at least 1")
	case o.ThroughputTime <= 0 || o.RowTime <= 0:
		return fmt.Errorf("bench: durations must be positive")
	case len(o.Clients) == 0:
		return fmt.Errorf("bench: give at least one client count")
	}
	for _, s := range o.Only {
		if !slices.Contains(Sections, s) {
			return fmt.Errorf("bench: no section %q: give one of %s", s, strings.Join(Sections, ", "))
		}
	}
	for _, c := range o.Clients {
		if c < 1 {
			return fmt.Errorf("bench: client count %d: give at least 1", c)
		}
	}
	return nil
}

// Run measures everything and returns the report. It fails only on bad
// options or when ctx ends; what cannot be measured is reported in its row.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	start := time.Now()
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...)
		}
	}
	tv := tools(ctx)
	r := &Report{
		Schema: Schema, Started: start.UTC().Truncate(time.Second), Quick: o.Quick,
		Settings: Settings{
			TrueRuns: o.TrueRuns, PythonRuns: o.PythonRuns, Density: o.Density, DensitySteps: o.densitySteps(),
			ThroughputSeconds: o.ThroughputTime.Seconds(), Clients: o.Clients,
		},
		Machine: machine(tv),
		Density: []DensityStep{},
		Notes:   []string{},
	}
	var qemu toolVersion
	for _, t := range tv {
		if t.name == "qemu" {
			qemu = t
		}
	}

	var startR, binR []Row
	var err error
	if o.want("start") {
		if binR, err = binaryRows(ctx, o, progress); err != nil {
			return nil, err
		}
		if startR, err = startRows(ctx, o, qemu, progress); err != nil {
			return nil, err
		}
	}
	var drv sandbox.Driver
	var drvErr error
	if o.want("exec", "throughput", "density", "snapshots", "export", "restart", "e2b", "ports") {
		// The native driver as the daemon makes it: its sandboxes outlive the
		// process (the agent holds them; nothing else runs per sandbox).
		d, err := native.New(native.Options{Persistent: true})
		if drvErr = err; drvErr == nil {
			drvErr = d.Probe(ctx)
			drv = d
		}
	}
	var execR, tputR, vmR, densR, wasmR, wasmTput []Row
	var steps []DensityStep
	var notes []string
	if o.want("exec", "throughput") {
		if execR, tputR, err = liveRows(ctx, o, drv, drvErr, progress); err != nil {
			return nil, err
		}
	}
	if o.want("microvm") {
		if vmR, err = microvmRows(ctx, o, progress); err != nil {
			return nil, err
		}
	}
	if o.want("density") {
		if densR, steps, notes, err = densityRows(ctx, o, drv, drvErr, progress); err != nil {
			return nil, err
		}
	}
	if o.want("wasm", "throughput") {
		if wasmR, wasmTput, err = wasmRows(ctx, o, progress); err != nil {
			return nil, err
		}
	}
	add := func(section string, rows []Row) {
		for _, row := range rows {
			if o.want(section) {
				r.Rows = append(r.Rows, row)
			}
		}
	}
	add("start", binR)
	add("start", startR)
	add("exec", execR)
	if o.want("docker") {
		add("docker", dockerRows(ctx, o, progress))
	}
	add("microvm", vmR)
	add("density", densR)
	if o.want("egress") {
		add("egress", egressRows(ctx, o, progress))
	}
	add("wasm", wasmR)
	if o.want("snapshots") {
		add("snapshots", snapshotRows(ctx, o, drv, drvErr, progress))
	}
	if o.want("export") {
		add("export", exportRows(ctx, o, drv, drvErr, progress))
	}
	add("throughput", tputR)
	add("throughput", wasmTput)
	if o.want("restart") {
		if drvErr == nil {
			add("restart", restartRows(ctx, o, progress))
		} else {
			add("restart", []Row{{Section: "restart", ID: "restart/reattach", What: "reattach sandboxes after a daemon restart (native)",
				Unit: UnitMS, Status: StatusFailed, Detail: drvErr.Error()}})
		}
	}
	if o.want("e2b") {
		add("e2b", e2bRows(ctx, o, drv, drvErr, progress))
	}
	if o.want("ports") {
		add("ports", portsRows(ctx, o, drv, drvErr, progress))
	}
	if o.want("image") {
		add("image", imageRows(ctx, o, progress))
	}
	if o.want("pause") {
		add("pause", pauseRows(ctx, o, progress))
	}
	if o.want("livefork") {
		add("livefork", liveForkRows(ctx, o, progress))
	}
	if steps != nil {
		r.Density = steps
	}
	r.Notes = append(r.Notes, notes...)
	fillRatios(r.Rows)
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}
