package bench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// pauseRowIDs are the pause section's rows, in order.
func pauseRowIDs() []string {
	var ids []string
	for _, sz := range pauseSizes {
		ids = append(ids, "pause/gvisor-"+sz.name, "pause/gvisor-"+sz.name+"-resume", "pause/gvisor-"+sz.name+"-stored")
	}
	return ids
}

// TestPauseRows: the pause rows are measured where gVisor runs, and the
// stored bytes hold at least the memory the sandbox filled.
func TestPauseRows(t *testing.T) {
	testcap.Require(t, "root", "cgroupv1", "runsc")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows := pauseRows(ctx, Options{Quick: true}, t.Logf)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
		if r.Status != StatusOK {
			t.Errorf("%s: %s %s", r.ID, r.Status, r.Detail)
			continue
		}
		if r.Stats != nil {
			t.Logf("%s: p50 %.0f ms", r.ID, r.Stats.P50)
		}
		if r.Value != nil {
			t.Logf("%s: %.0f MiB", r.ID, *r.Value)
		}
	}
	if want := pauseRowIDs(); !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v", ids, want)
	}
	for i, sz := range pauseSizes {
		if v := rows[3*i+2].Value; v != nil && *v < float64(sz.mem*3/4>>20) {
			t.Errorf("%s stores %.0f MiB, less than the %d MiB its sandbox filled", sz.name, *v, sz.mem*3/4>>20)
		}
	}
}
