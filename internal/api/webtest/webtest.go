// Package webtest runs the scripts of this directory, which drive the
// daemon's web console in headless Chromium with playwright-core (Debian's
// chromium, Node from apt), for the tests of internal/api and cmd/airlock.
package webtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// Require needs a working headless Chromium and Node, then installs
// playwright-core from package-lock.json (npm ci) unless it is there, and
// returns this directory. Without them the test skips, or fails when
// AIRLOCK_TEST_REQUIRE names "chromium" or "node".
func Require(t testing.TB) string {
	t.Helper()
	testcap.Require(t, "node", "chromium")
	dir, err := find()
	if err != nil {
		t.Fatal(err)
	}
	// One npm ci at a time: test binaries of several packages may get here
	// at once.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "airlock-webtest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(filepath.Join(dir, "node_modules/playwright-core/package.json")); err == nil {
		return dir
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		testcap.SkipOrFail(t, "node", "npm ci in internal/api/webtest failed: %v\n%s", err, out)
	}
	return dir
}

// find returns this directory: internal/api/webtest under the module's
// root, the first directory above the working directory with a go.mod.
func find() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "internal", "api", "webtest"), nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("webtest: no go.mod above the working directory")
		}
		d = up
	}
}

// Run runs node with script (a file of this directory) and args, for at
// most timeout, logs what it printed, and returns it.
func Run(t testing.TB, dir string, timeout time.Duration, script string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s: %s", script, out)
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("%s did not finish within %v", script, timeout)
	}
	return string(out), err
}
