package testrig

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// MountsUnder lists the mount points at or below dir in this process's
// mount namespace, deepest first (the order to unmount them in).
func MountsUnder(dir string) ([]string, error) {
	mounts, err := readMounts()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var points []string
	for _, m := range mounts {
		p := m.Point
		if dir == "/" || p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	// Deeper first; among equal paths (stacked mounts) the later one first.
	slices.Reverse(points)
	slices.SortStableFunc(points, func(a, b string) int { return depth(b) - depth(a) })
	return points, nil
}

// readMounts reads this process's mount table. A malformed line is
// skipped: cleaning up must not stop at it.
func readMounts() ([]mountinfo.Mount, error) {
	mounts, err := mountinfo.Read()
	var syntax *mountinfo.SyntaxError
	if err != nil && !errors.As(err, &syntax) {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	return mounts, nil
}

// depth is how many names a clean absolute path has: 0 for /.
func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// UnmountUnder detaches every mount at or below dir, deepest first, and
// says which could not be detached.
func UnmountUnder(dir string) error {
	var errs []error
	// A detached mount can uncover another at the same point: go round
	// until nothing is left or nothing changes.
	for range 8 {
		points, err := MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		errs = errs[:0]
		for _, p := range points {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			}
		}
	}
	points, _ := MountsUnder(dir)
	if len(points) > 0 {
		errs = append(errs, fmt.Errorf("still mounted under %s: %s", dir, strings.Join(points, ", ")))
	}
	return errors.Join(errs...)
}

// RigMount reports whether mount point p belongs to a test rig's own
// engine: the kube rig's cluster (containerd's overlays, the kubelet's
// volumes) or the Docker rig's engine. Those mount and unmount on the host
// while other packages' tests run beside them, so a check for mounts a
// sandbox left behind must not count them.
func RigMount(p string) bool {
	for _, dir := range []string{KubeDir, DockerDir, filepath.Join(CacheDir(), "dockerd")} {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}
