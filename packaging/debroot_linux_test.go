package packaging

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// The Debian root the package is installed into: Debian 12 minbase with
// systemd (what a server has; systemd-analyze reads its units), made by
// debootstrap once and cached by its recipe under $AIRLOCK_CACHE. Each
// test gets a fresh copy as an overlay, so the cache never changes.
const (
	debSuite   = "bookworm"
	debInclude = "systemd"
	// debRecipe names the cached root; change it when the recipe changes.
	debRecipe = debSuite + "-minbase-" + debInclude + "-1"
)

// cacheDir is where heavy builds are cached: $AIRLOCK_CACHE, else
// /var/cache/airlock.
func cacheDir() string {
	if d := os.Getenv("AIRLOCK_CACHE"); d != "" {
		return d
	}
	return "/var/cache/airlock"
}

// cachedDebRoot returns the cached Debian root, building it first when it
// is missing (about a minute; its time is logged).
func cachedDebRoot(t *testing.T) string {
	t.Helper()
	base := filepath.Join(cacheDir(), "debroot")
	final := filepath.Join(base, debRecipe)
	if _, err := os.Stat(final); err == nil {
		return final
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// One build at a time, across test binaries.
	lock, err := os.OpenFile(filepath.Join(base, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(final); err == nil {
		return final
	}
	tmp, err := os.MkdirTemp(base, ".build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+debInclude,
		debSuite, tmp, testcap.DebianMirror).CombinedOutput()
	if err != nil {
		t.Fatalf("debootstrap %s into %s: %v\n%s", debSuite, tmp, err, tail(string(out), 20))
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the Debian root %s in %v (cold; cached from now on)", final, time.Since(start).Round(time.Second))
	return final
}

// freshRoot returns a writable copy of the cached Debian root for this
// test: an overlay whose changes go to a temporary directory.
func freshRoot(t *testing.T) string {
	t.Helper()
	lower := cachedDebRoot(t)
	dir := t.TempDir()
	upper, work, root := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		t.Fatalf("mount an overlay of the Debian root: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount the Debian root: %v", err)
		}
	})
	return root
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
