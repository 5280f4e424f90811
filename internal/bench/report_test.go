package bench

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeReport has a row of every kind: measured with percentiles, measured
// with a value, each status, two baselines, a missing baseline.
func fakeReport() *Report {
	r := &Report{
		Schema:  Schema,
		Started: time.Date(2026, 11, 21, 6, 30, 0, 0, time.UTC),
		Seconds: 41.25,
		Quick:   true,
		Settings: Settings{TrueRuns: 30, PythonRuns: 10, Density: 20, DensitySteps: []int{2, 5, 10, 20},
			ThroughputSeconds: 1, Clients: []int{1, 2, 16}},
		Machine: Machine{Cores: 2, Kernel: "6.18.44-test", MemoryBytes: 24 << 30, AvailableBytes: 23 << 30,
			CgroupMode: "hybrid", LoadAvg: "0.28 1.35 1.17",
			Tools: []Tool{{Name: "airlock", Version: "(devel)"}, {Name: "bwrap", Version: "0.8.0"},
				{Name: "qemu", Missing: "apt-get install qemu-system-x86"}}},
		Rows: []Row{
			{Section: "start/true", ID: "start/true/fork-exec", What: "fork/exec (the floor)", Status: StatusOK, Unit: UnitMS,
				Stats: &Stats{N: 30, Min: 0.4, P50: 0.5, P90: 0.62, P99: 0.79, Max: 0.8, Mean: 0.55}},
			{Section: "start/true", ID: "start/true/bwrap", What: "bwrap (agent profile)", Status: StatusOK, Unit: UnitMS,
				Stats:   &Stats{N: 30, Min: 3, P50: 3.5, P90: 4.16, P99: 5.37, Max: 5.4, Mean: 3.6},
				Compare: []Comparison{{Baseline: "start/true/fork-exec", Name: "fork/exec"}}},
			{Section: "start/true", ID: "start/true/airlock-native", What: "airlock run, native driver", Status: StatusOK, Unit: UnitMS,
				Stats: &Stats{N: 30, Min: 15, P50: 17.5, P90: 20, P99: 31, Max: 31, Mean: 18},
				Compare: []Comparison{{Baseline: "start/true/bwrap", Name: "bwrap"},
					{Baseline: "start/true/fork-exec", Name: "fork/exec"}}},
			{Section: "start/true", ID: "start/true/runsc-do", What: "runsc do", Status: StatusMissing, Unit: UnitMS,
				Detail: "apt-get install runsc", Compare: []Comparison{{Baseline: "start/true/fork-exec", Name: "fork/exec"}}},
			{Section: "start/true", ID: "start/true/airlock-gvisor", What: "airlock run, gvisor driver", Status: StatusNotBuilt, Unit: UnitMS,
				Detail: "no gvisor driver yet"},
			{Section: "start/true", ID: "start/true/unshare", What: "unshare", Status: StatusFailed, Unit: UnitMS,
				Detail: "unshare: exit status 1: unshare failed: Operation not permitted"},
			{Section: "density", ID: "density/pss", What: "idle sandbox memory, PSS", Status: StatusOK, Unit: UnitMiB,
				Value: ptr(2.5), Compare: []Comparison{{Baseline: "density/pss-bwrap", Name: "bwrap idle"},
					{Baseline: "density/pss-runsc", Name: "runsc idle"}}},
			{Section: "density", ID: "density/pss-bwrap", What: "idle bwrap memory, PSS", Status: StatusOK, Unit: UnitMiB, Value: ptr(0.5)},
			{Section: "density", ID: "density/pss-runsc", What: "idle runsc memory, PSS", Status: StatusSkipped, Unit: UnitMiB,
				Detail: "stopped at 5 of 20 sandboxes"},
			{Section: "density", ID: "density/bend", What: "exec p99 bends at", Status: StatusOK, Unit: UnitSandboxes,
				Detail: "no bend up to 20 sandboxes"},
			{Section: "throughput", ID: "throughput/fork-exec-c1", What: "fork/exec, 1 client", Status: StatusOK, Unit: UnitRate, Value: ptr(1785.4)},
			{Section: "throughput", ID: "throughput/airlock-native-c1", What: "airlock exec, 1 client", Status: StatusOK, Unit: UnitRate,
				Value: ptr(357.08), Compare: []Comparison{{Baseline: "throughput/fork-exec-c1", Name: "fork/exec"}}},
		},
		Density: []DensityStep{{Sandboxes: 20, PSSBytes: 2.5 * (1 << 20), CgroupBytes: 1.7 * (1 << 20),
			Exec: Stats{N: 30, Min: 2, P50: 3, P90: 4, P99: 5, Max: 5, Mean: 3.2}}},
		Notes: []string{"density: stopped at 5 of 20 sandboxes"},
	}
	fillRatios(r.Rows)
	return r
}

func TestFillRatios(t *testing.T) {
	r := fakeReport()
	get := func(id string) Row {
		row, ok := r.Row(id)
		if !ok {
			t.Fatalf("no row %s", id)
		}
		return row
	}
	tests := []struct {
		row       string
		i         int
		wantFig   float64
		wantRatio float64
		noFigure  bool
		noRatio   bool
	}{
		{row: "start/true/bwrap", i: 0, wantFig: 0.5, wantRatio: 7},
		{row: "start/true/airlock-native", i: 0, wantFig: 3.5, wantRatio: 5},
		{row: "start/true/airlock-native", i: 1, wantFig: 0.5, wantRatio: 35},
		{row: "density/pss", i: 0, wantFig: 0.5, wantRatio: 5},
		{row: "density/pss", i: 1, noFigure: true, noRatio: true},       // the baseline was skipped
		{row: "start/true/runsc-do", i: 0, wantFig: 0.5, noRatio: true}, // this row is missing
		{row: "throughput/airlock-native-c1", i: 0, wantFig: 1785.4, wantRatio: 0.2},
	}
	for _, tt := range tests {
		c := get(tt.row).Compare[tt.i]
		switch {
		case tt.noFigure && c.Figure != nil:
			t.Errorf("%s vs %s: figure %v, want none", tt.row, c.Name, *c.Figure)
		case !tt.noFigure && (c.Figure == nil || *c.Figure != tt.wantFig):
			t.Errorf("%s vs %s: figure %v, want %g", tt.row, c.Name, c.Figure, tt.wantFig)
		}
		switch {
		case tt.noRatio && c.Ratio != nil:
			t.Errorf("%s vs %s: ratio %v, want none", tt.row, c.Name, *c.Ratio)
		case !tt.noRatio && (c.Ratio == nil || abs(*c.Ratio-tt.wantRatio) > 1e-9):
			t.Errorf("%s vs %s: ratio %v, want %g", tt.row, c.Name, c.Ratio, tt.wantRatio)
		}
	}
}

func abs(v float64) float64 { return max(v, -v) }

func TestJSONRoundTrip(t *testing.T) {
	want := fakeReport()
	var b bytes.Buffer
	if err := want.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"schema": 1`, `"id": "start/true/bwrap"`, `"status": "not_built"`, `"p99": 5.37`, `"ratio": 7`, `"ratio": null`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b.String())
		}
	}
	got, err := ReadJSON(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the report:\ngot  %+v\nwant %+v", got, want)
	}

	if _, err := ReadJSON(strings.NewReader(`{"schema": 2, "rows": []}`)); err == nil || !strings.Contains(err.Error(), "schema 2") {
		t.Errorf("ReadJSON of schema 2 = %v, want a schema error", err)
	}
	if _, err := ReadJSON(strings.NewReader(`{"schema": 1, "rows": [`)); err == nil {
		t.Error("ReadJSON of truncated JSON succeeded")
	}
}
