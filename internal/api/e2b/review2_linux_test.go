package e2b

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestWatchDirCapNative is TestWatchDirCap on the native driver, whose
// listings go through the sandbox's agent (the review's setup).
func TestWatchDirCapNative(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock")
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	watchDirCap(t, newEnvWith(t, drv, supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}, nil))
}
