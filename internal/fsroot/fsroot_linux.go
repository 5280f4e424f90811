//go:build linux

package fsroot

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

const (
	// resolveFlags confine every lookup: ".." and absolute symlinks stop at
	// the root, and /proc magic links (/proc/self/root, /proc/self/fd/N)
	// fail with ELOOP.
	resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	// strictFlags are those of the directories a NoFollow root writes in.
	strictFlags = resolveFlags | unix.RESOLVE_NO_SYMLINKS
	// maxID is the largest valid uid or gid ((uid_t)-1 means "none").
	maxID = math.MaxUint32 - 1
	// maxDirEntries bounds what ReadDir returns, so that a workload cannot
	// make the agent allocate without limit.
	maxDirEntries = 100_000
	// maxRemoveDepth bounds how deep Remove descends; each level holds one
	// descriptor.
	maxRemoveDepth = 512
	// tempPrefix starts the name of WriteFile's temporary files.
	tempPrefix = ".airlock-write-"
)

// Root is a directory whose paths are resolved only inside it. Its methods
// are safe for concurrent use.
type Root struct {
	*core
	// writeResolve are the resolve flags of the directories a write works
	// in (see NoFollow).
	writeResolve uint64
}

// core is what every view of a root shares.
type core struct {
	uid, gid int
	workdir  string

	mu sync.RWMutex
	fd int // O_PATH descriptor of the root directory; -1 once closed
}

// NoFollow returns a view of the same root whose writes (WriteFile, Mkdir,
// Remove, Rename, Symlink) follow no symlink on the way to their file: a
// path that Resolve returned is written where it was checked, even when a
// command swaps one of its directories for a symlink meanwhile; a path
// through a symlink fails. Reads still follow symlinks inside the root.
func (r *Root) NoFollow() *Root { return &Root{core: r.core, writeResolve: strictFlags} }

// Open opens dir as a root. Operations run with the file-system identity
// (fsuid/fsgid) uid/gid, with no supplementary groups when gid is set; -1
// keeps the caller's own. Relative paths are relative to workdir, an
// absolute path inside the root such as "/workspace". It fails with an
// error wrapping sandbox.ErrUnsupported on kernels without openat2 (before
// Linux 5.6).
func Open(dir string, uid, gid int, workdir string) (*Root, error) {
	if uid < -1 || uid > maxID || gid < -1 || gid > maxID {
		return nil, fmt.Errorf("open file root: uid %d or gid %d out of range: %w", uid, gid, sandbox.ErrInvalid)
	}
	if !strings.HasPrefix(workdir, "/") {
		return nil, fmt.Errorf("open file root: working directory %q is not absolute: %w", workdir, sandbox.ErrInvalid)
	}
	wd, err := cleanPath("/", workdir)
	if err != nil {
		return nil, fmt.Errorf("open file root: working directory: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open file root: open the root directory: %w", err)
	}
	r := &Root{core: &core{uid: uid, gid: gid, workdir: wd, fd: fd}, writeResolve: resolveFlags}
	probe, err := r.open(fd, "/", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("open file root: openat2 needs Linux 5.6 or later: %w", sandbox.ErrUnsupported)
		}
		return nil, fmt.Errorf("open file root: %w", err)
	}
	unix.Close(probe)
	return r, nil
}

// Close releases the root. Operations under way finish first; later ones
// fail with an error wrapping sandbox.ErrClosed.
func (r *Root) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		return fmt.Errorf("close file root: %w", err)
	}
	return nil
}

// do runs f with the root's descriptor, on a thread with the root's
// identity.
func (r *Root) do(f func(root int) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.fd < 0 {
		return fmt.Errorf("file root is closed: %w", sandbox.ErrClosed)
	}
	return asIdentity(r.uid, r.gid, func() error { return f(r.fd) })
}

// open resolves the clean in-root path p with openat2 inside root,
// following symlinks that stay inside it.
func (r *Root) open(root int, p string, flags int) (int, error) {
	return r.openHow(root, p, flags, resolveFlags)
}

// openHow resolves the clean in-root path p with openat2 inside root, with
// the resolve flags how.
func (r *Root) openHow(root int, p string, flags int, resolve uint64) (int, error) {
	rel := strings.TrimPrefix(p, "/")
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(root, rel, &how)
		// EAGAIN: a rename or mount raced a ".." lookup; the kernel asks to retry.
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// openDir opens the directory at the clean path p, which a write works in,
// as an O_PATH descriptor usable with the *at calls, refusing kernel file
// systems (and with NoFollow, any symlink on the way).
func (r *Root) openDir(root int, p string) (int, error) {
	return r.openDirHow(root, p, r.writeResolve)
}

// openDirHow is openDir with the resolve flags how.
func (r *Root) openDirHow(root int, p string, resolve uint64) (int, error) {
	fd, err := r.openHow(root, p, unix.O_PATH|unix.O_DIRECTORY, resolve)
	if err != nil {
		return -1, err
	}
	if err := checkFS(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkFS refuses a descriptor on /proc, /sys and other kernel file systems.
func checkFS(fd int) error {
	var s unix.Statfs_t
	if err := unix.Fstatfs(fd, &s); err != nil {
		return err
	}
	switch uint32(s.Type) {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEBUGFS_MAGIC, unix.TRACEFS_MAGIC, unix.SECURITYFS_MAGIC, unix.BPF_FS_MAGIC:
		return errKernelFS
	}
	return nil
}

// ReadFile copies the regular file name to w, from offset and at most
// limit bytes (0: to the end), and returns the number of bytes copied.
// A symlink is followed within the root. Anything but a regular file
// (directory, device, FIFO, socket, a file on /proc) is refused with an
// error wrapping sandbox.ErrInvalid.
func (r *Root) ReadFile(name string, offset, limit int64, w io.Writer) (int64, error) {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	if offset < 0 || limit < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d or limit %d: %w", p, offset, limit, sandbox.ErrInvalid)
	}
	var fd int
	err = r.do(func(root int) error {
		var err error
		fd, err = r.openRegular(root, p)
		return err
	})
	if err != nil {
		return 0, fail("read", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	n := int64(math.MaxInt64) - offset
	if limit > 0 && limit < n {
		n = limit
	}
	copied, err := io.Copy(w, io.NewSectionReader(f, offset, n))
	if err != nil {
		return copied, fail("read", p, err)
	}
	return copied, nil
}

// openRegular opens the regular file at p for reading. It checks the file
// through an O_PATH descriptor first, so that a device or a FIFO is never
// really opened, then opens it for reading without blocking and checks it
// is still the same file.
func (r *Root) openRegular(root int, p string) (int, error) {
	pfd, err := r.open(root, p, unix.O_PATH)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, err
	}
	if err := checkFS(pfd); err != nil {
		return -1, err
	}
	if err := checkRegular(&st); err != nil {
		return -1, err
	}
	fd, err := r.open(root, p, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK)
	if err != nil {
		return -1, err
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st2.Dev != st.Dev || st2.Ino != st.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("the file was replaced while being opened; try again: %w", sandbox.ErrInvalid)
	}
	return fd, nil
}

// checkRegular refuses anything but a regular file.
func checkRegular(st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		return nil
	}
	return fmt.Errorf("is %s, not a regular file: %w", kind(st.Mode), sandbox.ErrInvalid)
}

// kind names the file type in mode, with an article.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "a regular file"
}

// WriteFile creates or replaces the regular file name with what src
// holds, with mode's permission bits (0 means 0644), owned by the root's
// uid/gid, and returns the number of bytes written. Its parent directory
// must exist. The data goes to a new temporary file in the same directory
// that is then renamed over name, so readers see the old or the new file,
// never a part, and a symlink at name is replaced, never followed. Past
// maxBytes (when > 0) it stops with an error wrapping sandbox.ErrLimit. On
// any error the file name is unchanged and the temporary file removed.
func (r *Root) WriteFile(name string, src io.Reader, mode fs.FileMode, maxBytes int64) (int64, error) {
	p, dir, base, err := splitPath(r.workdir, name)
	if err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	perm := uint32(mode.Perm())
	if mode == 0 {
		perm = 0o644
	}
	var dfd, fd int
	var tmp string
	err = r.do(func(root int) error {
		var err error
		if dfd, err = r.openDir(root, dir); err != nil {
			return err
		}
		if fd, tmp, err = createTemp(dfd, base, perm); err != nil {
			unix.Close(dfd)
		}
		return err
	})
	if err != nil {
		return 0, fail("write", p, err)
	}
	defer unix.Close(dfd)

	f := os.NewFile(uintptr(fd), p)
	in := src
	if maxBytes > 0 {
		in = io.LimitReader(src, maxBytes+1)
	}
	n, err := io.Copy(f, in)
	if err == nil && maxBytes > 0 && n > maxBytes {
		err = fmt.Errorf("the file is larger than %d bytes: %w", maxBytes, sandbox.ErrLimit)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}

	// Commit or clean up as the workload too: the rename needs its rights
	// on the directory, and the temporary file is its own.
	rerr := asIdentity(r.uid, r.gid, func() error {
		if err == nil {
			err = unix.Renameat(dfd, tmp, dfd, base)
		}
		if err != nil {
			if uerr := unix.Unlinkat(dfd, tmp, 0); uerr != nil && uerr != unix.ENOENT {
				return fmt.Errorf("remove the temporary file %s: %w", tmp, uerr)
			}
		}
		return nil
	})
	if err = errors.Join(err, rerr); err != nil {
		return 0, fail("write", p, err)
	}
	return n, nil
}

// createTemp checks that name in the directory dfd is absent, a regular
// file or a symlink, then creates a new temporary file next to it.
func createTemp(dfd int, name string, perm uint32) (int, string, error) {
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
	case err != nil:
		return -1, "", err
	case st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFLNK:
		return -1, "", fmt.Errorf("is %s, not a regular file: %w", kind(st.Mode), sandbox.ErrInvalid)
	}
	for range 8 {
		tmp := tempPrefix + rand.Text()
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return -1, "", err
		}
		// Set the exact mode: the process umask must not change it.
		if err := unix.Fchmod(fd, perm); err != nil {
			unix.Close(fd)
			_ = unix.Unlinkat(dfd, tmp, 0)
			return -1, "", err
		}
		return fd, tmp, nil
	}
	return -1, "", unix.EEXIST
}

// ReadDir lists the directory name, sorted by name. Path fields are
// absolute paths inside the root; symlinks are described, not followed.
func (r *Root) ReadDir(name string) ([]sandbox.FileInfo, error) {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	var infos []sandbox.FileInfo
	err = r.do(func(root int) error {
		fd, err := r.open(root, p, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), p)
		defer f.Close()
		if err := checkFS(fd); err != nil {
			return err
		}
		for {
			names, err := f.Readdirnames(1024)
			for _, n := range names {
				info, err := statAt(fd, n, path.Join(p, n))
				if errors.Is(err, unix.ENOENT) {
					continue // removed since it was listed
				}
				if err != nil {
					return err
				}
				infos = append(infos, info)
			}
			if len(infos) > maxDirEntries {
				return fmt.Errorf("more than %d entries; list it with a command: %w", maxDirEntries, sandbox.ErrLimit)
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
	if err != nil {
		return nil, fail("read directory", p, err)
	}
	slices.SortFunc(infos, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// Stat describes the file name. A final symlink is described, not
// followed; its Target is what it holds.
func (r *Root) Stat(name string) (sandbox.FileInfo, error) {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat: %w", err)
	}
	var info sandbox.FileInfo
	err = r.do(func(root int) error {
		if p == "/" {
			var st unix.Stat_t
			if err := unix.Fstat(root, &st); err != nil {
				return err
			}
			info = fileInfo("/", "/", &st)
			return nil
		}
		dfd, err := r.openDirHow(root, path.Dir(p), resolveFlags)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		info, err = statAt(dfd, path.Base(p), p)
		return err
	})
	if err != nil {
		return sandbox.FileInfo{}, fail("stat", p, err)
	}
	return info, nil
}

// statAt describes name in the directory dfd without following a symlink;
// p is its in-root path.
func statAt(dfd int, name, p string) (sandbox.FileInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return sandbox.FileInfo{}, err
	}
	info := fileInfo(name, p, &st)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		buf := make([]byte, maxPath)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return sandbox.FileInfo{}, err
		}
		info.Target = string(buf[:n])
	}
	return info, nil
}

// fileInfo converts st.
func fileInfo(name, p string, st *unix.Stat_t) sandbox.FileInfo {
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	typ := "other"
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		typ = "file"
	case unix.S_IFDIR:
		typ, mode = "dir", mode|fs.ModeDir
	case unix.S_IFLNK:
		typ, mode = "symlink", mode|fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	sec, nsec := st.Mtim.Unix()
	return sandbox.FileInfo{
		Name:    name,
		Path:    p,
		Size:    st.Size,
		Mode:    mode,
		ModTime: time.Unix(sec, nsec),
		Type:    typ,
	}
}

// Mkdir creates the directory name and any missing parents, with mode's
// permission bits (0 means 0755) less the process umask. A directory
// already there, or a symlink to one, is fine; anything else there fails
// with an error wrapping sandbox.ErrExists.
func (r *Root) Mkdir(name string, mode fs.FileMode) error {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	perm := uint32(mode.Perm())
	if mode == 0 {
		perm = 0o755
	}
	err = r.do(func(root int) error { return r.mkdirAll(root, p, perm) })
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EEXIST) {
		err = &errnoError{msg: "it or a parent exists and is not a directory", class: sandbox.ErrExists, errno: unix.EEXIST}
	}
	if err != nil {
		return fail("mkdir", p, err)
	}
	return nil
}

// mkdirAll creates the directory p and its missing parents.
func (r *Root) mkdirAll(root int, p string, perm uint32) error {
	fd, err := r.openHow(root, p, unix.O_PATH|unix.O_DIRECTORY, r.writeResolve)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.ENOENT) || p == "/" {
		return err
	}
	dir := path.Dir(p)
	if err := r.mkdirAll(root, dir, perm); err != nil {
		return err
	}
	dfd, err := r.openDir(root, dir)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = unix.Mkdirat(dfd, path.Base(p), perm)
	if errors.Is(err, unix.EEXIST) {
		// Made meanwhile, or a dangling symlink: only a directory will do.
		if fd, err = r.openHow(root, p, unix.O_PATH|unix.O_DIRECTORY, r.writeResolve); err == nil {
			unix.Close(fd)
			return nil
		}
		return unix.EEXIST
	}
	return err
}

// Remove removes the file, symlink (not its target) or whole directory tree
// name. It never follows a symlink while descending.
func (r *Root) Remove(name string) error {
	p, dir, base, err := splitPath(r.workdir, name)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	err = r.do(func(root int) error {
		dfd, err := r.openDir(root, dir)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return removeAt(dfd, base, 0)
	})
	if err != nil {
		return fail("remove", p, err)
	}
	return nil
}

// removeAt removes name, and everything below it, from the directory dfd.
func removeAt(dfd int, name string, depth int) error {
	for range 8 {
		err := unix.Unlinkat(dfd, name, 0)
		if !errors.Is(err, unix.EISDIR) {
			return err // nil, or a real failure
		}
		if depth >= maxRemoveDepth {
			return fmt.Errorf("the tree is more than %d directories deep; remove it with a command: %w", maxRemoveDepth, sandbox.ErrLimit)
		}
		err = removeChildren(dfd, name, depth)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			continue // replaced by a non-directory meanwhile: unlink that
		}
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return err
		}
		// Something was added meanwhile: go round again.
	}
	return unix.ENOTEMPTY
}

// removeChildren empties the directory name in dfd, which it opens without
// following a symlink.
func removeChildren(dfd int, name string, depth int) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			if err := removeAt(fd, n, depth+1); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Rename moves oldname to newname, replacing a file there as rename(2)
// does. Neither may be the root or end in "." or "..".
func (r *Root) Rename(oldname, newname string) error {
	op, odir, obase, err := splitPath(r.workdir, oldname)
	if err != nil {
		return fmt.Errorf("rename: %w", err)
	}
	np, ndir, nbase, err := splitPath(r.workdir, newname)
	if err != nil {
		return fmt.Errorf("rename %s: %w", op, err)
	}
	err = r.do(func(root int) error {
		ofd, err := r.openDir(root, odir)
		if err != nil {
			return err
		}
		defer unix.Close(ofd)
		nfd, err := r.openDir(root, ndir)
		if err != nil {
			return err
		}
		defer unix.Close(nfd)
		return unix.Renameat(ofd, obase, nfd, nbase)
	})
	if err != nil {
		return fail("rename", op+" to "+np, err)
	}
	return nil
}

// Symlink makes a symlink name that points to target. The target is stored
// as given (it may point anywhere, as in any file system: the file API
// never follows it out of the root); name must not exist.
func (r *Root) Symlink(target, name string) error {
	p, dir, base, err := splitPath(r.workdir, name)
	if err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	switch {
	case target == "":
		return fmt.Errorf("symlink %s: empty target: %w", p, sandbox.ErrInvalid)
	case strings.IndexByte(target, 0) >= 0:
		return fmt.Errorf("symlink %s: the target contains a NUL byte: %w", p, sandbox.ErrInvalid)
	case len(target) > maxPath:
		return fmt.Errorf("symlink %s: the target is longer than %d bytes: %w", p, maxPath, sandbox.ErrInvalid)
	}
	err = r.do(func(root int) error {
		dfd, err := r.openDir(root, dir)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		return unix.Symlinkat(target, dfd, base)
	})
	if err != nil {
		return fail("symlink", p, err)
	}
	return nil
}

// Resolve returns the path name leads to inside the root: every symlink of
// its directories resolved (inside the root, as every lookup is), its last
// element as given (a write replaces a symlink there, never follows it).
// Directories that do not exist yet are kept as written. What Resolve
// returns, written through NoFollow, is what a policy must judge and the
// audit log record.
func (r *Root) Resolve(name string) (string, error) {
	p, err := cleanPath(r.workdir, name)
	if err != nil {
		return "", fmt.Errorf("resolve: %w", err)
	}
	if p == "/" {
		return p, nil
	}
	dir, tail := path.Dir(p), []string{path.Base(p)}
	var out string
	err = r.do(func(root int) error {
		for {
			fd, err := r.open(root, dir, unix.O_PATH|unix.O_DIRECTORY)
			if err == nil {
				real, rerr := inRoot(root, fd)
				unix.Close(fd)
				if rerr != nil {
					return rerr
				}
				out = path.Join(append([]string{real}, tail...)...)
				return nil
			}
			if !errors.Is(err, unix.ENOENT) || dir == "/" {
				return err
			}
			tail = append([]string{path.Base(dir)}, tail...)
			dir = path.Dir(dir)
		}
	})
	if err != nil {
		return "", fail("resolve", p, err)
	}
	return out, nil
}

// inRoot returns the path of the directory fd relative to root, as an
// absolute path inside the root.
func inRoot(root, fd int) (string, error) {
	base, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", root))
	if err != nil {
		return "", err
	}
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	if base == "/" {
		return p, nil
	}
	rel, ok := strings.CutPrefix(p, base)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", fmt.Errorf("%s is not below the root %s", p, base)
	}
	return "/" + strings.TrimPrefix(rel, "/"), nil
}
