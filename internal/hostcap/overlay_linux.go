package hostcap

import (
	"context"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// probeOverlay makes a small overlay mount (detached: nothing appears in
// the host's mount table) of three fresh directories, as the cow mounts
// do.
func probeOverlay(context.Context) Result {
	if !isRoot() {
		return fail("overlay mounts of host directories need root"+notRoot(), rootFix)
	}
	dir, err := os.MkdirTemp("", "airlock-overlay-probe-")
	if err != nil {
		return fail("make a directory: "+err.Error(), "set TMPDIR to a writable directory")
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"lower", "upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return fail("make a directory: "+err.Error(), "set TMPDIR to a writable directory")
		}
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fail("fsopen(overlay): "+err.Error(), "load the overlay module (modprobe overlay) or use a kernel with overlayfs")
	}
	defer unix.Close(fsfd)
	for _, kv := range [][2]string{{"lowerdir", filepath.Join(dir, "lower")}, {"upperdir", filepath.Join(dir, "upper")}, {"workdir", filepath.Join(dir, "work")}, {"redirect_dir", "off"}, {"metacopy", "off"}, {"index", "off"}} {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return fail("configure an overlay ("+kv[0]+"): "+err.Error(), "use a kernel of 5.2 or later with overlayfs")
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fail("make an overlay: "+err.Error(), "TMPDIR must be on a file system overlayfs takes as upper layer (ext4, xfs, tmpfs)")
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fail("mount an overlay: "+err.Error(), "use a kernel of 5.2 or later with overlayfs")
	}
	unix.Close(mfd)
	return ok("overlayfs with the new mount API")
}
