package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// bindHome binds the sandbox's /workspace at its home (agent.Config.Home,
// /home/NAME), in the tree at root ("/", or the staging root before the
// pivot): the same tmpfs under a second name, with its size, its owner
// (the workload) and its flags (a bind keeps nosuid and nodev). Where the
// root has no such directory and cannot make one (read-only, as an image's
// or a runtime's root is), a small read-only tmpfs over /home holds the
// mount point. It runs while nothing of the workload runs, on a root the
// operator gave.
func bindHome(root, home string) error {
	if err := sandbox.ValidHome(home); err != nil || home == "" {
		return err
	}
	dst := filepath.Join(root, home)
	if err := homeMountPoint(dst); err != nil {
		return fmt.Errorf("make the home %s: %w", home, err)
	}
	if err := unix.Mount(filepath.Join(root, sandbox.Workspace), dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s at the home %s: %w", sandbox.Workspace, home, err)
	}
	return nil
}

// homeMountPoint makes sure dst is a directory to mount on.
func homeMountPoint(dst string) error {
	fi, err := os.Lstat(dst)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("%s is not a directory in the root", dst)
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	parent := filepath.Dir(dst)
	pfi, err := os.Lstat(parent)
	if err != nil || !pfi.IsDir() {
		return fmt.Errorf("the root has no directory %s (a symlink is not taken): make it in the image", parent)
	}
	if err := os.Mkdir(dst, 0o755); err == nil {
		return nil
	}
	// A read-only root: a tmpfs over the parent, with just the mount point.
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("tmpfs", parent, "tmpfs", flags, "size=4k,nr_inodes=4,mode=0755"); err != nil {
		return fmt.Errorf("cover %s with a tmpfs for the mount point: %w", parent, err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("", parent, "", flags|unix.MS_REMOUNT|unix.MS_RDONLY, "size=4k,nr_inodes=4,mode=0755"); err != nil {
		return fmt.Errorf("make the tmpfs over %s read-only: %w", parent, err)
	}
	return nil
}
