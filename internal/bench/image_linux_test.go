package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// TestImageRows: the image section measures its four rows with the test
// rigs' debootstrap root (python3) as the image, the registry on loopback
// and the rig's Docker engine, and logs them.
func TestImageRows(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "registry", "debroot")
	if dockerErr != nil {
		testcap.SkipOrFail(t, "docker", "no Docker engine for the docker pull row: %v", dockerErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := rootimage.Ensure(ctx, testrig.CacheDir(), rootimage.Spec{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o := Defaults(true)
	o.PythonRuns, o.RowTime, o.Settle = 10, 60*time.Second, 0
	o.Airlock, o.ImageTar, o.Only = buildAirlock(t), root.Path, []string{"image"}
	o.Progress = os.Stderr
	r, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(r.Rows))
	}
	for _, row := range r.Rows {
		if row.Status != StatusOK {
			t.Errorf("%s: %s (%s)", row.ID, row.Status, row.Detail)
			continue
		}
		line := fmt.Sprintf("%s: p50 %.1f ms (n=%d, min %.1f, max %.1f)", row.ID, row.Stats.P50, row.Stats.N, row.Stats.Min, row.Stats.Max)
		for _, c := range row.Compare {
			if c.Ratio != nil {
				line += fmt.Sprintf(", %.2fx %s", *c.Ratio, c.Name)
			}
		}
		t.Log(line + " — " + row.What)
	}
}
