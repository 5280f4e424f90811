package e2b_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestSDKsForkGVisor: through the SDK unchanged, sandbox.fork({ count: 2 })
// of a gVisor sandbox gives two running copies that answer its background
// server's secret, each with its own machine id, host name and entropy
// (fork.test.mjs).
func TestSDKsForkGVisor(t *testing.T) {
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "runsc", "node")
	dir := npmInstall(t)
	d, key, other := startServe(t, "gvisor")
	d.settled(t)
	times := filepath.Join(t.TempDir(), "times")
	if n := runNode(t, dir, d, nodeEnv{key: key, other: other, extra: []string{"AIRLOCK_E2B_TIMES=" + times}}, "fork.test.mjs"); n != 1 {
		t.Fatalf("node run.mjs reported %d tests, want 1", n)
	}
	if b, err := os.ReadFile(times); err == nil {
		t.Log(string(b))
	}
}
