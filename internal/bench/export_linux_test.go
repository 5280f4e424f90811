package bench

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestExportRows: both export rows measure a throughput against the S3
// test server (the full bench's row list is TestQuickBenchIsComplete's).
func TestExportRows(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "s3")
	ctx := context.Background()
	d, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := exportRows(ctx, Options{Quick: testing.Short()}, d, d.Probe(ctx), func(f string, a ...any) { t.Logf(f, a...) })
	for _, r := range rows {
		if r.Status != StatusOK || r.Value == nil || *r.Value <= 0 {
			t.Fatalf("%s: %s %s", r.ID, r.Status, r.Detail)
		}
		t.Logf("%s: %.0f MiB/s", r.ID, *r.Value)
	}
}
