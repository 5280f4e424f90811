package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/drivertest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

// The conformance suite's mounts group checks Spec.Mounts and Spec.Root;
// these are what only gVisor does.

// TestMountsUnpinned: the mounts the driver pins for runsc are gone from the
// host once runsc has its own.
func TestMountsUnpinned(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in := sandboxT(t, d, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: dir, Target: "/mnt/data"}}})
	if out, errOut, res := drivertest.Run(t, in, "ls", "/mnt/data"); res.ExitCode != 0 {
		t.Fatalf("the mount is not there: %q %q %+v", out, errOut, res)
	}
	if left := mountsBelow(filepath.Join(d.bundlesDir(), in.ID())); len(left) > 0 {
		t.Errorf("the sandbox's mounts are still attached on the host: %v", left)
	}
}

// TestRootBare: unlike the native driver, gVisor needs no mount points in
// the root (the bundle's own root holds them), and leaves the root as it
// was.
func TestRootBare(t *testing.T) {
	requireGVisor(t)
	bare := t.TempDir()
	if err := os.Chmod(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	sandboxtest.CopyProgram(t, "/bin/sh", bare, "/bin/sh")
	before := sandboxtest.ListTree(t, bare)
	in := sandboxT(t, newDriver(t), sandbox.Spec{Root: bare, Limits: smallLimits})
	if out, errOut, res := drivertest.Run(t, in, "/bin/sh", "-c", "echo ok > /workspace/f && read x < /workspace/f && echo $x"); out != "ok\n" || res.ExitCode != 0 {
		t.Errorf("in a bare root: %q %q %+v", out, errOut, res)
	}
	if after := sandboxtest.ListTree(t, bare); after != before {
		t.Errorf("the host's bare root changed:\nbefore %s\nafter  %s", before, after)
	}
}
