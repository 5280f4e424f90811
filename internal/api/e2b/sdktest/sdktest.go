// Package sdktest holds the npm project of the official E2B SDKs that the
// E2B endpoints' tests and `airlock bench` drive airlock with
// (package-lock.json pins e2b, @e2b/code-interpreter and OpenAI's Agents
// SDK), and installs it.
package sdktest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// Dir returns the absolute path of the npm project.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Installed says whether dir holds the project's packages, installed from
// its lock file as it is now.
func Installed(dir string) bool {
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return false
	}
	inst, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	return err == nil && !inst.ModTime().Before(lock.ModTime())
}

// Install installs the lock file's packages into Dir() with npm ci, unless
// they are installed already, and returns Dir(). Processes that install at
// once take turns through a lock file.
func Install(ctx context.Context) (string, error) {
	dir := Dir()
	lf, err := os.OpenFile(filepath.Join(os.TempDir(), "airlock-e2b-npm.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()
	if Installed(dir) {
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s (no registry?): %w\n%s", dir, err, out)
	}
	return dir, nil
}
