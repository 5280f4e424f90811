//go:build linux

package cow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Layer is a cow mount made on the host.
type Layer struct {
	// Dir is the host directory holding the layer (what Open takes).
	Dir    string
	Source string
	Target string
}

// Make makes the cow mount m of sandbox id in dir (a directory of the
// driver's state that does not exist yet): it records the host
// directory's manifest, mounts a tmpfs of sizeBytes holding the upper
// layer, and returns a detached overlay mount (nosuid, nodev) of the host
// directory under it, for the driver to attach in the sandbox. On an
// error nothing is left.
//
// With owner set, the sandbox sees the files the host directory's owner
// owns as owner's (an idmapped mount of the host directory as the lower
// layer), and the files it makes belong to owner in the upper layer;
// where the host's file system cannot be idmapped, Make fails.
func Make(ctx context.Context, dir, id string, m sandbox.Mount, sizeBytes int64, owner IDMap) (l *Layer, mnt *os.File, err error) {
	src, err := unix.Openat2(unix.AT_FDCWD, m.Source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, nil, fmt.Errorf("cow mount %s: %w: the path contains a symlink; give the real path (see realpath)", m.Source, sandbox.ErrInvalid)
	case errors.Is(err, unix.ENOTDIR):
		return nil, nil, fmt.Errorf("cow mount %s: %w: a cow mount needs a directory", m.Source, sandbox.ErrInvalid)
	case errors.Is(err, unix.ENOENT):
		return nil, nil, fmt.Errorf("cow mount %s: %w: no such directory on the host", m.Source, sandbox.ErrNotFound)
	case err != nil:
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	md := &meta{Sandbox: id, Source: m.Source, Target: m.Target, Dev: st.Dev, Ino: st.Ino, UID: int(st.Uid), GID: int(st.Gid)}
	rd, err := unix.Openat(src, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	w := &walker{ctx: ctx, max: MaxEntries}
	md.Entries, err = w.host(rd, m.Target)
	if err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: record the host directory: %w", m.Source, err)
	}
	sortEntries(md.Entries)

	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	defer func() {
		if err != nil {
			_ = Remove(dir)
		}
	}()
	layer := filepath.Join(dir, "layer")
	if err := os.Mkdir(layer, 0o700); err != nil {
		return nil, nil, err
	}
	inodes := max(sizeBytes/1024, 4096)
	opts := "size=" + strconv.FormatInt(sizeBytes, 10) + ",nr_inodes=" + strconv.FormatInt(inodes, 10) + ",mode=0700"
	if err := unix.Mount("tmpfs", layer, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: mount its upper layer's tmpfs: %w", m.Source, err)
	}
	if err := unix.Mount("", layer, "", unix.MS_PRIVATE, ""); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	up, work := upperPath(dir), workPath(dir)
	if err := os.Mkdir(up, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, nil, err
	}
	lower, uid, gid := src, int(st.Uid), int(st.Gid)
	if owner != (IDMap{}) {
		mfd, err := owner.idmapped(src, uid, gid)
		if err != nil {
			return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
		}
		defer unix.Close(mfd)
		lower, uid, gid = mfd, owner.UID, owner.GID
	}
	// The merged root shows the upper root's owner and mode: the host
	// directory's, as the sandbox sees it.
	if err := os.Chown(up, uid, gid); err != nil {
		return nil, nil, err
	}
	if err := os.Chmod(up, os.FileMode(st.Mode&0o777)|unixModeBits(st.Mode)); err != nil {
		return nil, nil, err
	}
	if err := md.save(dir); err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: keep its record: %w", m.Source, err)
	}
	f, err := overlay(lower, up, work)
	if err != nil {
		return nil, nil, fmt.Errorf("cow mount %s: %w", m.Source, err)
	}
	return &Layer{Dir: dir, Source: m.Source, Target: m.Target}, f, nil
}

func unixModeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// overlay makes the detached overlay mount of lower (an O_PATH descriptor)
// under upper.
func overlay(lower int, upper, work string) (*os.File, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("overlayfs is not available (modprobe overlay): %w", err)
	}
	defer unix.Close(fsfd)
	set := [][2]string{
		{"lowerdir", "/proc/self/fd/" + strconv.Itoa(lower)},
		{"upperdir", upper},
		{"workdir", work},
		// Renamed directories are copied (EXDEV to rename(2)), files are
		// copied up whole, and no index: the upper layer is plain files,
		// whiteouts and opaque directories, which is what Changes reads.
		{"redirect_dir", "off"},
		{"metacopy", "off"},
		{"index", "off"},
		{"xino", "off"},
	}
	for _, kv := range set {
		if err := unix.FsconfigSetString(fsfd, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("configure the overlay (%s): %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("make the overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("mount the overlay: %w", err)
	}
	return os.NewFile(uintptr(mfd), "cow-overlay"), nil
}

// Remove removes what Make made in dir: the overlay and tmpfs mounts and
// the record. A journal of an interrupted apply is kept for Recover.
// Nothing below a mount that does not come off is deleted.
func Remove(dir string) error {
	forget(dir)
	merged := filepath.Join(dir, "merged")
	_ = unix.Unmount(merged, unix.MNT_DETACH)
	layer := filepath.Join(dir, "layer")
	if err := unix.Unmount(layer, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount the cow layer %s: %w", layer, err)
	}
	_ = os.Remove(merged)
	if err := os.Remove(layer); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the cow layer %s: %w", layer, err)
	}
	if _, err := os.Stat(journalPath(dir)); err == nil {
		return nil
	}
	_ = os.Remove(metaPath(dir))
	_ = os.Remove(metaPath(dir) + ".tmp")
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(filepath.Dir(dir)) // the sandbox's directory, once empty
	return nil
}

// Attach attaches the detached mount mnt at dir/merged and returns that
// path: for drivers that hand the sandbox a path (gVisor's gofer).
func Attach(dir string, mnt *os.File) (string, error) {
	merged := filepath.Join(dir, "merged")
	if err := os.Mkdir(merged, 0o700); err != nil {
		return "", err
	}
	if err := unix.MoveMount(int(mnt.Fd()), "", unix.AT_FDCWD, merged, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("attach the cow overlay: %w", err)
	}
	return merged, nil
}
