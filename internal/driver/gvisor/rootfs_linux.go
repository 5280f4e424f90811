package gvisor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/rootfs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// composeRoot makes the directory of a composed root at dir, with what the
// native agent composes: the top directories, and /bin, /lib… as the host
// has them (symlinks into /usr are copied, directories bound). /etc is the
// snapshot etc (see etcSnapshot). It returns the read-only binds the spec
// must add: /usr, /etc, and /bin, /lib… where the host has them as
// directories.
func composeRoot(dir, etc string) ([]bind, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the root: %w", err)
	}
	for _, d := range rootfs.RootDirs {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("make root directory /%s: %w", d, err)
		}
	}
	binds := []bind{{Source: "/usr", Target: "/usr"}, {Source: etc, Target: "/etc"}}
	for _, d := range rootfs.UsrLinks {
		b, err := mirror("/"+d, filepath.Join(dir, d), "/"+d)
		if err != nil {
			return nil, err
		}
		binds = append(binds, b...)
	}
	return binds, nil
}

// hiddenUsr lists the directories of rootfs.HiddenUsr this host has, as
// paths of the sandbox.
func hiddenUsr() []string {
	var out []string
	for _, d := range rootfs.HiddenUsr {
		if fi, err := os.Lstat("/usr/" + d); err == nil && fi.IsDir() {
			out = append(out, "/usr/"+d)
		}
	}
	return out
}

// etcDir is where the /etc snapshots live below the driver's state.
const etcDir = "etc"

// etcSnapshot returns a directory that holds a composed root's /etc: a
// copy of the host's /etc allowlist, and the generated files. It is made
// once for what the host's allowlist holds now (the name is a fingerprint
// of every entry's name, kind, size, mode, owner, time and link target)
// and shared, read-only, by every sandbox: one bind instead of one per
// entry, each of which runsc's gofer serves (seventeen cost a sandbox's
// start about 40 ms). Snapshots no bundle uses any more are removed when
// a new one is made.
func (d *Driver) etcSnapshot() (string, error) {
	fp, err := etcFingerprint()
	if err != nil {
		return "", err
	}
	base := filepath.Join(d.rc.StateDir, "gvisor", etcDir)
	dir := filepath.Join(base, fp)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("make the /etc snapshot directory: %w", err)
	}
	tmp, err := os.MkdirTemp(base, ".new-")
	if err != nil {
		return "", fmt.Errorf("snapshot /etc: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("snapshot /etc: %w", err)
	}
	for _, name := range rootfs.EtcAllowlist {
		if err := copyTree("/etc/"+name, filepath.Join(tmp, name)); err != nil {
			return "", err
		}
	}
	for name, content := range etcFiles() {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o644); err != nil {
			return "", fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	// Another airlock may have made the same one meanwhile: theirs is
	// as good.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr != nil {
			return "", fmt.Errorf("snapshot /etc: %w", err)
		}
	}
	d.pruneEtc(dir)
	return dir, nil
}

// pruneEtc removes the /etc snapshots other than keep that no bundle's
// spec names.
func (d *Driver) pruneEtc(keep string) {
	base := filepath.Join(d.rc.StateDir, "gvisor", etcDir)
	snaps, _ := os.ReadDir(base)
	bundles, _ := os.ReadDir(d.bundlesDir())
	var specs [][]byte
	for _, b := range bundles {
		if spec, err := os.ReadFile(filepath.Join(d.bundlesDir(), b.Name(), "config.json")); err == nil {
			specs = append(specs, spec)
		} else if !errors.Is(err, os.ErrNotExist) {
			return // unsure what is in use: keep everything
		}
	}
	for _, s := range snaps {
		p := filepath.Join(base, s.Name())
		if p == keep || strings.HasPrefix(s.Name(), ".new-") {
			continue
		}
		if !slices.ContainsFunc(specs, func(spec []byte) bool { return bytes.Contains(spec, []byte(p)) }) {
			if err := os.RemoveAll(p); err != nil {
				d.rc.Logger.Warn("remove an old /etc snapshot", "dir", p, "err", err)
			}
		}
	}
}

// etcFingerprint hashes what an /etc snapshot is made of: every entry
// below the host's allowlist (name, kind, size, mode, owner, modification
// time, link target) and the generated files. Entries are looked at
// relative to their directory's descriptor (one path step each, not the
// whole path again): the walk costs every gVisor sandbox's start, and
// /etc/alternatives and /etc/ssl hold some 700 entries.
func etcFingerprint() (string, error) { return fingerprintEtc("/etc", rootfs.EtcAllowlist) }

// fingerprintEtc is etcFingerprint of the entries names of the directory
// etcDir.
func fingerprintEtc(etcDir string, names []string) (string, error) {
	h := sha256.New()
	etc, err := unix.Open(etcDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("look at host %s: %w", etcDir, err)
	}
	defer unix.Close(etc)
	var buf []byte
	for _, name := range names {
		if buf, err = fingerprintAt(h, buf, etc, name, "/etc/"+name); err != nil {
			return "", fmt.Errorf("look at host %s/%s: %w", etcDir, name, err)
		}
	}
	files := etcFiles()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "generated %s\x00%s\n", name, files[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// fingerprintAt hashes the entry name of the directory dirfd, at path p,
// and what is below it, in lexical order; an entry that is gone is passed
// over. buf is scratch space, returned for reuse.
func fingerprintAt(h io.Writer, buf []byte, dirfd int, name, p string) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return buf, nil
		}
		return buf, err
	}
	buf = append(buf[:0], p...)
	// A symlink is never changed in place: a new target is a new link,
	// with an inode and times of its own, so its target is not read.
	for _, v := range []uint64{uint64(st.Ino), uint64(st.Mode), uint64(st.Size), uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano()), uint64(st.Uid), uint64(st.Gid)} {
		buf = strconv.AppendUint(append(buf, 0), v, 10)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		_, err := h.Write(append(buf, '\n'))
		if err != nil {
			return buf, err
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return buf, nil
			}
			return buf, err
		}
		dir := os.NewFile(uintptr(fd), p)
		names, err := dir.Readdirnames(-1)
		if err != nil {
			dir.Close()
			return buf, err
		}
		slices.Sort(names)
		for _, n := range names {
			if buf, err = fingerprintAt(h, buf, fd, n, p+"/"+n); err != nil {
				dir.Close()
				return buf, err
			}
		}
		return buf, dir.Close()
	}
	_, err := h.Write(append(buf, '\n'))
	return buf, err
}

// copyTree copies the host's src to dst: files with their content, mode and
// owner, directories recursively, symlinks as they are; anything else, and
// a missing src, is left out.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at host %s: %w", src, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("read host symlink %s: %w", src, err)
		}
		err = os.Symlink(link, dst)
		if err == nil {
			err = ownLike(dst, fi)
		}
		return err
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		for _, e := range ents {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
	default:
		return nil
	}
	// Owner first: chown clears the setuid and setgid bits chmod sets.
	if err := ownLike(dst, fi); err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// ownLike gives dst the owner and group of the file fi describes.
func ownLike(dst string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("copy %s: %w", dst, err)
	}
	return nil
}

// composeGivenRoot makes the directory of a root at dir from the caller's
// root, pinned at given: its top-level entries as binds (read-only) or
// copied symlinks, and /proc, /dev, /tmp and /workspace of the sandbox's
// own. runsc's gofer makes the mount points of binds in the root's
// directory on the host; this one is the bundle's, so the caller's
// directory is never written to.
func composeGivenRoot(dir, given string) ([]bind, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("make the root: %w", err)
	}
	own := []string{"proc", "dev", "tmp", "workspace"}
	for _, d := range own {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("make root directory /%s: %w", d, err)
		}
	}
	ents, err := os.ReadDir(given)
	if err != nil {
		return nil, fmt.Errorf("read the root: %w", err)
	}
	var binds []bind
	for _, e := range ents {
		if slices.Contains(own, e.Name()) || e.Name() == "sys" {
			continue
		}
		b, err := mirror(filepath.Join(given, e.Name()), filepath.Join(dir, e.Name()), "/"+e.Name())
		if err != nil {
			return nil, err
		}
		binds = append(binds, b...)
	}
	return binds, nil
}

// mirror makes dst look like the host's src: a symlink is copied; a
// directory or regular file gets a mount point, and a bind onto target; a
// missing src (or another kind of file) is left out.
func mirror(src, dst, target string) ([]bind, error) {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look at host %s: %w", src, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(src)
		if err != nil {
			return nil, fmt.Errorf("read host symlink %s: %w", src, err)
		}
		if err := os.Symlink(link, dst); err != nil {
			return nil, fmt.Errorf("make %s: %w", dst, err)
		}
		return nil, nil
	case fi.IsDir():
		err = os.Mkdir(dst, 0o755)
	case fi.Mode().IsRegular():
		err = os.WriteFile(dst, nil, 0o644)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("make %s: %w", dst, err)
	}
	return []bind{{Source: src, Target: target}}, nil
}

// pinDir is the directory of the bundle that holds the pinned mounts.
const pinDir = "mnt"

// pin makes what the caller asked to mount (the root, when given, and the
// mounts) a mount of its own below the bundle, from the very file that
// was checked, and returns the paths runsc is to mount instead: runsc
// opens its sources by path, later, and a source swapped for a symlink
// meanwhile must change nothing. Each is opened without following any
// symlink, checked, cloned (open_tree), made read-only (unless writable),
// nosuid and nodev by the kernel, and attached at bundle/mnt/<n>, a
// private mount that only root can reach. unpin detaches them once runsc
// has its own copies.
//
// A copy-on-write mount (Mount.Cow) is attached from the overlay cow gives
// for it (its index in mounts), writable.
func pin(bundle, root string, mounts []sandbox.Mount, cow func(i int) (*os.File, error)) (string, []sandbox.Mount, error) {
	if root == "" && len(mounts) == 0 {
		return "", nil, nil
	}
	dir := filepath.Join(bundle, pinDir)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("make the bundle's mount directory: %w", err)
	}
	// A private mount of its own: nothing attached below propagates to
	// other mount namespaces.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return "", nil, fmt.Errorf("bind the bundle's mount directory: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return "", nil, fmt.Errorf("make the bundle's mount directory private: %w", err)
	}
	attach := func(name, src string, writable, mustBeDir bool) (string, error) {
		fd, isDir, err := detachedMount(src, writable, mustBeDir)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		dst := filepath.Join(dir, name)
		if isDir {
			err = os.Mkdir(dst, 0o700)
		} else {
			err = os.WriteFile(dst, nil, 0o600)
		}
		if err != nil {
			return "", fmt.Errorf("make a mount point: %w", err)
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return "", fmt.Errorf("attach the mount: %w", err)
		}
		return dst, nil
	}
	var pinnedRoot string
	if root != "" {
		p, err := attach("root", root, false, true)
		if err != nil {
			return "", nil, fmt.Errorf("root %s: %w", root, err)
		}
		pinnedRoot = p
	}
	out := make([]sandbox.Mount, len(mounts))
	for i, m := range mounts {
		if m.Cow {
			f, err := cow(i)
			if err != nil {
				return "", nil, err
			}
			dst := filepath.Join(dir, strconv.Itoa(i))
			if err := os.Mkdir(dst, 0o700); err != nil {
				f.Close()
				return "", nil, fmt.Errorf("make a mount point: %w", err)
			}
			err = unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
			f.Close()
			if err != nil {
				return "", nil, fmt.Errorf("attach the cow mount of %s: %w", m.Source, err)
			}
			out[i] = sandbox.Mount{Source: dst, Target: m.Target, Writable: true}
			continue
		}
		p, err := attach(strconv.Itoa(i), m.Source, m.Writable, false)
		if err != nil {
			return "", nil, fmt.Errorf("mount %s: %w", m.Source, err)
		}
		out[i] = sandbox.Mount{Source: p, Target: m.Target, Writable: m.Writable}
	}
	return pinnedRoot, out, nil
}

// unpin detaches the bundle's pinned mounts from the host's mount
// namespace; runsc's gofer keeps its own. It is safe to call when nothing
// was pinned.
func unpin(bundle string) error {
	dir := filepath.Join(bundle, pinDir)
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("detach the bundle's mounts: %w", err)
	}
	return nil
}

// mountsBelow lists the host's mount points at or below dir.
func mountsBelow(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return pointsBelow(f, dir)
}

// pointsBelow lists the mount points of a mount table at or below dir,
// passing over lines that are not well-formed.
func pointsBelow(r io.Reader, dir string) []string {
	mounts, _ := mountinfo.Parse(r)
	var out []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

// detachedMount opens path without following any symlink, checks it (a
// directory, or unless mustBeDir a regular file) and clones the mount tree
// there, read-only unless writable, never with setuid or devices. It
// returns the detached mount and whether it is a directory.
func detachedMount(path string, writable, mustBeDir bool) (int, bool, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, false, fmt.Errorf("%w: the path contains a symlink; give the real path (see realpath)", sandbox.ErrInvalid)
	case errors.Is(err, unix.ENOENT):
		return -1, false, fmt.Errorf("%w: no such file or directory on the host", sandbox.ErrNotFound)
	case err != nil:
		return -1, false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, false, err
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if !isDir && (mustBeDir || st.Mode&unix.S_IFMT != unix.S_IFREG) {
		if mustBeDir {
			return -1, false, fmt.Errorf("%w: the root must be a directory", sandbox.ErrInvalid)
		}
		return -1, false, fmt.Errorf("%w: only directories and regular files can be mounted", sandbox.ErrInvalid)
	}
	mfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return -1, false, fmt.Errorf("clone the mount: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		unix.Close(mfd)
		return -1, false, fmt.Errorf("make the mount read-only: %w", err)
	}
	return mfd, isDir, nil
}

// writeSpec writes the bundle's config.json.
func writeSpec(path string, s *specs.Spec) error {
	b, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("encode the OCI spec: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write the OCI spec: %w", err)
	}
	return nil
}

// etcFiles are the generated files of the /etc snapshot: rootfs.EtcFiles,
// and an empty machine-id, the mount point of the sandbox's own (the
// agent binds its identity files over machine-id, hostname and hosts:
// agent.ContainedConfig.MachineID).
func etcFiles() map[string]string {
	files := rootfs.EtcFiles(workloadUID, workloadGID, hostname)
	files["machine-id"] = ""
	return files
}
