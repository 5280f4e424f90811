package testrig_test

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// TestUnmountUnder: nested and stacked mounts below a directory, and on it,
// all go, deepest first; a sibling directory's mount stays.
func TestUnmountUnder(t *testing.T) {
	testcap.Require(t, "root")
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	other := filepath.Join(base, "dir2")
	for _, d := range []string{dir, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount := func(p string) {
		t.Helper()
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount %s: %v", p, err)
		}
	}
	mount(dir)
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	mount(filepath.Join(dir, "a"))
	mount(filepath.Join(dir, "a")) // stacked
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	mount(filepath.Join(dir, "a", "b"))
	mount(other)
	t.Cleanup(func() { _ = testrig.UnmountUnder(base) })

	points, err := testrig.MountsUnder(dir)
	if err != nil || len(points) != 4 {
		t.Fatalf("MountsUnder = %v, %v; want 4 mounts", points, err)
	}
	if points[0] != filepath.Join(dir, "a", "b") || points[len(points)-1] != dir {
		t.Errorf("MountsUnder order %v: want the deepest first, %s last", points, dir)
	}
	all, err := testrig.MountsUnder("/")
	if err != nil || len(all) < 6 || all[len(all)-1] != "/" {
		t.Errorf("MountsUnder(/) = %v, %v; want every mount, / last", all, err)
	}
	if err := testrig.UnmountUnder(dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := testrig.MountsUnder(dir); len(left) != 0 {
		t.Errorf("left mounted: %v", left)
	}
	if left, _ := testrig.MountsUnder(other); len(left) != 1 {
		t.Errorf("the sibling's mount: %v, want it kept", left)
	}
}
