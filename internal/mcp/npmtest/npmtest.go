// Package npmtest installs the npm packages the MCP tests drive airlock
// with (the TypeScript SDK, the MCP Inspector, the conformance suite), from
// internal/mcp/testdata/node/package-lock.json.
package npmtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// Dir returns the absolute path of the npm project (testdata/node).
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "node")
}

// Install makes sure the packages of the lock file are installed (npm ci,
// unless node_modules is newer than the lock file) and returns Dir(). It
// skips the test when Node or the registry is missing, and fails it instead
// when AIRLOCK_TEST_REQUIRE names "node". Test binaries that run at the
// same time take turns through a lock file.
func Install(t testing.TB) string {
	t.Helper()
	testcap.Require(t, "node")
	dir := Dir()
	lf, err := os.OpenFile(filepath.Join(os.TempDir(), "airlock-mcp-npm.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !inst.ModTime().Before(lock.ModTime()) {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		testcap.SkipOrFail(t, "node", "npm ci in %s failed (no registry?): %v\n%s", dir, err, out)
	}
	return dir
}
