package native

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// openMount checks a mount's source once and returns a detached copy of it
// (open_tree), which is what the agent attaches. The check and the mount
// use the same open file, so swapping the source for a symlink after the
// check changes nothing.
func openMount(m sandbox.Mount) (*os.File, bool, error) {
	f, err := detachedMount(m.Source, m.Writable, false)
	if err != nil {
		return nil, false, fmt.Errorf("mount %s: %w", m.Source, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("mount %s: %w", m.Source, err)
	}
	return f, st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}

// detachedMount opens path without following any symlink and clones the
// mount tree there, read-only unless writable, never with setuid or devices.
func detachedMount(path string, writable, mustBeDir bool) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: the path contains a symlink; give the real path (see realpath)", sandbox.ErrInvalid)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("%w: no such file or directory on the host", sandbox.ErrNotFound)
	case err != nil:
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFDIR && (mustBeDir || t != unix.S_IFREG) {
		return nil, fmt.Errorf("%w: only directories and regular files can be mounted", sandbox.ErrInvalid)
	}
	mfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return nil, fmt.Errorf("clone the mount: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("make the mount read-only: %w", err)
	}
	return os.NewFile(uintptr(mfd), path), nil
}
