package kubebin_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runsc"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin"
)

// TestGvisorPin: the shim is built from the same gVisor as runsc.
func TestGvisorPin(t *testing.T) {
	if kubebin.GvisorVersion != runsc.Version {
		t.Errorf("kubebin.GvisorVersion = %s, runsc.Version = %s: bump both (and the Makefile's RUNSC_VERSION)",
			kubebin.GvisorVersion, runsc.Version)
	}
	mk, err := os.ReadFile("../../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUNSC_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	if m == nil || string(m[1]) != kubebin.GvisorVersion {
		t.Errorf("the Makefile's RUNSC_VERSION is %q, kubebin.GvisorVersion %s", m, kubebin.GvisorVersion)
	}
}
