package testcap

import (
	"context"
	"strings"
	"testing"
)

// TestProbeKubernetesNotBuilt: with an empty cache the probe fails, names
// what is missing and says to run make kube-rig.
func TestProbeKubernetesNotBuilt(t *testing.T) {
	if !isRoot() {
		t.Skip("the probe says 'needs root' first; covered by the root case")
	}
	t.Setenv("AIRLOCK_CACHE", t.TempDir())
	r := Probe(context.Background(), "kubernetes")
	if r.OK {
		t.Fatalf("probe OK with an empty cache: %+v", r)
	}
	if !strings.Contains(r.Why, "not built") || !strings.Contains(r.Fix, "make kube-rig") {
		t.Errorf("probe = %+v, want why 'not built' and fix 'make kube-rig'", r)
	}
}
