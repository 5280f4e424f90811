package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Schema is the version of the JSON layout of Report. It changes only when
// a field changes meaning or goes away; fields may be added in any version.
const Schema = 1

// Status says whether a row was measured.
type Status string

const (
	// StatusOK: the row was measured; Stats or Value holds the figure.
	StatusOK Status = "ok"
	// StatusMissing: the tool the row needs is not installed; Detail is
	// the command that installs it.
	StatusMissing Status = "missing"
	// StatusNotBuilt: airlock has no such driver or feature yet.
	StatusNotBuilt Status = "not_built"
	// StatusFailed: the tool is there but the measurement failed; Detail
	// says why.
	StatusFailed Status = "failed"
	// StatusSkipped: not measured on purpose (the host's free memory does
	// not allow it); Detail says why.
	StatusSkipped Status = "skipped"
)

// Units of the rows.
const (
	UnitMS        = "ms"
	UnitMiB       = "MiB"
	UnitRate      = "execs/s"
	UnitSandboxes = "sandboxes"
	UnitRequests  = "requests/s"
	UnitMiBps     = "MiB/s"
	UnitTasks     = "tasks"
)

// Report is the outcome of one bench run; `airlock bench --json FILE`
// writes it as JSON. The layout (schema 1):
//
//	{
//	  "schema": 1,
//	  "started": "2026-11-21T06:30:00Z",     // RFC 3339
//	  "seconds": 41.2,                      // wall time of the whole run
//	  "quick": true,
//	  "settings": {...},                    // Settings: run counts, steps
//	  "machine": {...},                     // Machine: cores, kernel, tools
//	  "rows": [                             // Row: one per measurement, in table order
//	    {"section": "start/true", "id": "start/true/bwrap",
//	     "what": "bwrap 0.8.0 (agent profile)", "status": "ok", "unit": "ms",
//	     "stats": {"n": 30, "min": 3.1, "p50": 3.5, "p90": 4.2, "p99": 5.4, "max": 5.4, "mean": 3.6},
//	     "compare": [{"baseline": "start/true/fork-exec", "name": "fork/exec",
//	                  "figure": 0.51, "ratio": 6.9}]},
//	    {"section": "start/true", "id": "start/true/qemu", "what": "bare QEMU",
//	     "status": "missing", "detail": "apt-get install qemu-system-x86"},
//	    ...
//	  ],
//	  "density": [{"sandboxes": 20, "pss_bytes": ..., "cgroup_bytes": ..., "exec": {...}}, ...],
//	  "notes": ["..."]
//	}
//
// Row ids are stable: "<section>/<subject>", where section is one of
// start/true, start/python, exec, microvm, density, egress, wasm,
// snapshots, throughput, restart, e2b (whose published-* rows are figures others
// published, not measured here). Every row of the table is present
// whatever the host has; what could not be measured says so in status and
// detail. Latencies are milliseconds, memory MiB per
// sandbox, throughput completed execs per second.
type Report struct {
	Schema   int           `json:"schema"`
	Started  time.Time     `json:"started"`
	Seconds  float64       `json:"seconds"`
	Quick    bool          `json:"quick"`
	Settings Settings      `json:"settings"`
	Machine  Machine       `json:"machine"`
	Rows     []Row         `json:"rows"`
	Density  []DensityStep `json:"density"`
	Notes    []string      `json:"notes"`
}

// Settings are the run counts a report was made with.
type Settings struct {
	// TrueRuns is the number of timed one-shot runs of /bin/true, and of
	// execs in the exec round trip.
	TrueRuns int `json:"true_runs"`
	// PythonRuns is the number of timed one-shot runs of python3.
	PythonRuns int `json:"python_runs"`
	// Density is the most idle sandboxes started at once.
	Density int `json:"density"`
	// DensitySteps are the sandbox counts the density test grows through.
	DensitySteps []int `json:"density_steps"`
	// ThroughputSeconds is how long each throughput level runs.
	ThroughputSeconds float64 `json:"throughput_seconds"`
	// Clients are the concurrency levels of the throughput test.
	Clients []int `json:"clients"`
}

// Machine describes the host the report was measured on.
type Machine struct {
	Cores int `json:"cores"`
	// Kernel is the kernel release (uname -r).
	Kernel string `json:"kernel"`
	// MemoryBytes and AvailableBytes are MemTotal and MemAvailable at the start.
	MemoryBytes    uint64 `json:"memory_bytes"`
	AvailableBytes uint64 `json:"available_bytes"`
	// CgroupMode is "v1", "v2" or "hybrid" (v1 controllers plus a v2 mount).
	CgroupMode string `json:"cgroup_mode"`
	// LoadAvg is the 1, 5 and 15 minute load average at the start.
	LoadAvg string `json:"load_avg"`
	// Tools are the versions of airlock, Go and each baseline's tool.
	Tools []Tool `json:"tools"`
}

// Tool is one program the bench uses, and its version.
type Tool struct {
	Name string `json:"name"`
	// Version is empty when the tool is missing.
	Version string `json:"version,omitempty"`
	// Missing is the command that installs the tool, when it is missing.
	Missing string `json:"missing,omitempty"`
}

// Row is one measurement.
type Row struct {
	// Section groups rows under a heading: start/true, start/python, exec,
	// density, egress, throughput, restart.
	Section string `json:"section"`
	// ID is the row's stable key: "<section>/<subject>".
	ID string `json:"id"`
	// What says what was measured, for people.
	What   string `json:"what"`
	Status Status `json:"status"`
	// Detail says, when the status is not ok, why and what fixes it; on a
	// measured row it may add a remark (failed runs, a memory stop).
	Detail string `json:"detail,omitempty"`
	// Unit is the unit of Stats or Value.
	Unit string `json:"unit,omitempty"`
	// Stats are the percentiles of a latency, when the row has samples.
	Stats *Stats `json:"stats,omitempty"`
	// Value is the single figure of a row without samples.
	Value *float64 `json:"value,omitempty"`
	// Failures counts runs that failed and are not in Stats.
	Failures int `json:"failures,omitempty"`
	// Compare sets the row beside its baselines.
	Compare []Comparison `json:"compare,omitempty"`
}

// Comparison is a row's figure divided by a baseline's.
type Comparison struct {
	// Baseline is the ID of the baseline row.
	Baseline string `json:"baseline"`
	// Name is the baseline's short name ("bwrap").
	Name string `json:"name"`
	// Figure is the baseline's p50 (or value); null when it has none.
	Figure *float64 `json:"figure"`
	// Ratio is this row's p50 (or value) divided by Figure; null when
	// either is missing.
	Ratio *float64 `json:"ratio"`
}

// DensityStep is what the density test saw with Sandboxes idle sandboxes
// alive.
type DensityStep struct {
	Sandboxes int `json:"sandboxes"`
	// PSSBytes is the mean, per sandbox, of the summed PSS of its processes.
	PSSBytes float64 `json:"pss_bytes"`
	// CgroupBytes is the mean, per sandbox, of the memory its memory
	// cgroup reports (user and kernel).
	CgroupBytes float64 `json:"cgroup_bytes"`
	// Tasks is the mean, per sandbox, of the kernel tasks (threads) of its
	// processes: its agent, which is also what keeps it alive.
	Tasks float64 `json:"tasks,omitempty"`
	// Exec are the latencies of /bin/true execs spread round-robin over
	// the sandboxes, in ms.
	Exec         Stats `json:"exec"`
	ExecFailures int   `json:"exec_failures,omitempty"`
	// ExecStopped says why the execs stopped short (the host's free
	// memory); empty when all ran.
	ExecStopped string `json:"exec_stopped,omitempty"`
	// HostBytes is how much MemAvailable fell per sandbox since the test
	// began: the agents, the kernel's share and whatever else the host
	// did meanwhile.
	HostBytes float64 `json:"host_bytes,omitempty"`
	// KernelBytes is how much the kernel's unreclaimable slab
	// (SUnreclaim) grew per sandbox since the test began.
	KernelBytes float64 `json:"kernel_bytes,omitempty"`
	// Create are the latencies of creates (each closed again) made with
	// Sandboxes live, in ms.
	Create         Stats `json:"create"`
	CreateFailures int   `json:"create_failures,omitempty"`
}

// Figure is the number a row is compared by: its p50, else its value.
func (r Row) Figure() (float64, bool) {
	if r.Status != StatusOK {
		return 0, false
	}
	if r.Stats != nil && r.Stats.N > 0 {
		return r.Stats.P50, true
	}
	if r.Value != nil {
		return *r.Value, true
	}
	return 0, false
}

// Row returns the row with the given id.
func (r *Report) Row(id string) (Row, bool) {
	for _, row := range r.Rows {
		if row.ID == id {
			return row, true
		}
	}
	return Row{}, false
}

// fillRatios computes every comparison from the rows' figures.
func fillRatios(rows []Row) {
	byID := map[string]Row{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	for i := range rows {
		mine, ok := rows[i].Figure()
		for j := range rows[i].Compare {
			c := &rows[i].Compare[j]
			c.Figure, c.Ratio = nil, nil
			base, found := byID[c.Baseline]
			if !found {
				continue
			}
			theirs, bok := base.Figure()
			if !bok {
				continue
			}
			c.Figure = ptr(theirs)
			if ok && theirs > 0 {
				c.Ratio = ptr(mine / theirs)
			}
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write bench report as JSON: %w", err)
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("read bench report: %w", err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("read bench report: schema %d, this airlock reads %d", r.Schema, Schema)
	}
	return &r, nil
}

func ptr[T any](v T) *T { return &v }
