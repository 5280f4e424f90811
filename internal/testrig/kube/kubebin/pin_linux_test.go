package kubebin_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin"
)

// TestGvisorPin: the shim is built from the same gVisor as runsc.
func TestGvisorPin(t *testing.T) {
	if kubebin.GvisorVersion != hostcap.RunscVersion {
		t.Errorf("kubebin.GvisorVersion = %s, hostcap.RunscVersion = %s: bump both (and the Makefile's RUNSC_VERSION)",
			kubebin.GvisorVersion, hostcap.RunscVersion)
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
