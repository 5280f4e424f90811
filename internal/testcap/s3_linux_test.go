package testcap

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/s3server"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// TestProbeS3NotBuilt: with an empty cache the probe fails and says to run
// make s3-rig.
func TestProbeS3NotBuilt(t *testing.T) {
	t.Setenv("AIRLOCK_CACHE", t.TempDir())
	r := Probe(context.Background(), "s3")
	if r.OK {
		t.Fatalf("probe OK with an empty cache: %+v", r)
	}
	if !strings.Contains(r.Why, "not built") || !strings.Contains(r.Fix, "make s3-rig") {
		t.Errorf("probe = %+v, want why 'not built' and fix 'make s3-rig'", r)
	}
}

// TestProbeS3: where the server is built, the probe starts it and stores
// an object through it.
func TestProbeS3(t *testing.T) {
	if _, err := s3server.Find(testrig.CacheDir()); err != nil {
		t.Skipf("%v (the probe's failure case is TestProbeS3NotBuilt)", err)
	}
	r := Probe(context.Background(), "s3")
	if !r.OK || !strings.Contains(r.Detail, s3server.Version) {
		t.Fatalf("probe = %+v, want OK naming versitygw %s", r, s3server.Version)
	}
}
