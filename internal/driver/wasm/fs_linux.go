package wasm

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	wazerosys "github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// A module sees /workspace and /tmp, each a host directory of the sandbox's
// own that is its own root: every path is resolved by the kernel with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) below that directory, and
// operations on a final name use the *at system calls on the resolved
// parent, which follow no symlink. Nothing resolves a path from the host's
// root, so a symlink the module makes ("/etc/passwd", "../../..") leads
// back into the same directory, never out. Each mount holds its files to
// its size (Limits.DiskBytes, TmpBytes) by counting what writes add.

const (
	resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	// maxWalkDepth bounds how deep a recount descends.
	maxWalkDepth = 256
)

// mount is one writable directory of a sandbox (/workspace, /tmp).
type mount struct {
	guest string // "/workspace"
	dir   string // the host directory
	root  int    // O_PATH descriptor of dir

	limit      int64 // bytes
	maxEntries int64 // files, directories and links

	mu      sync.Mutex
	used    int64 // bytes counted; at least what the files hold
	entries int64 // entries counted; at least what there are
	open    map[*file]struct{}
}

// newMount opens dir as the mount guest of size limit.
func newMount(guest, dir string, limit int64) (*mount, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &mount{guest: guest, dir: dir, root: fd, limit: limit, maxEntries: max(4096, limit/4096), open: map[*file]struct{}{}}, nil
}

func (m *mount) close() { _ = unix.Close(m.root) }

// openIn resolves p inside the mount and opens it.
func (m *mount) openIn(p string, flags int, mode uint32) (int, experimentalsys.Errno) {
	if p == "" {
		p = "."
	}
	if flags&unix.O_CREAT == 0 {
		mode = 0 // openat2 refuses a mode it would not use
	}
	fd, err := unix.Openat2(m.root, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveInRoot})
	if err != nil {
		return -1, experimentalsys.UnwrapOSError(err)
	}
	return fd, 0
}

// parent resolves the directory of p inside the mount and returns it with
// p's final name. The mount's root itself has no parent.
func (m *mount) parent(p string) (int, string, experimentalsys.Errno) {
	p = strings.TrimRight(p, "/")
	dir, name := path.Split(p)
	if name == "" || name == "." || name == ".." {
		return -1, "", experimentalsys.EINVAL
	}
	fd, errno := m.openIn(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, name, errno
}

// addEntry counts a new file, directory or link, or refuses it when the
// mount has as many as it may hold.
func (m *mount) addEntry() experimentalsys.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries+1 > m.maxEntries {
		m.recount()
		if m.entries+1 > m.maxEntries {
			return experimentalsys.Errno(unix.ENOSPC)
		}
	}
	m.entries++
	return 0
}

// grow lets the file fd grow to end bytes, or as far as the mount has room
// for, and returns the end it may reach. m.mu is held.
func (m *mount) grow(fd int, end int64) (int64, experimentalsys.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, experimentalsys.UnwrapOSError(err)
	}
	if end <= st.Size {
		return end, 0
	}
	need := end - st.Size
	if m.used+need > m.limit {
		m.recount()
	}
	room := max(m.limit-m.used, 0)
	if need > room {
		end = st.Size + room
	}
	m.used += end - st.Size
	return end, 0
}

// recount sets used and entries to what the mount holds: every file below
// it, and the files still open that were removed. What writes add is
// counted as they happen; what removals free is found here, when the mount
// seems full. m.mu is held.
func (m *mount) recount() {
	var used, entries int64
	fd, err := unix.Openat(m.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		used, entries = walkSizes(fd, 0)
	}
	for f := range m.open {
		var st unix.Stat_t
		if unix.Fstat(f.fd, &st) == nil && st.Nlink == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG {
			used += st.Size
		}
	}
	m.used, m.entries = used, entries
}

// walkSizes adds up the sizes of the regular files below the directory fd
// (which it closes) and counts its entries, following no symlink.
func walkSizes(fd, depth int) (size, entries int64) {
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			entries++
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				size += st.Size
			case unix.S_IFDIR:
				if depth >= maxWalkDepth {
					continue
				}
				sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err == nil {
					s, e := walkSizes(sub, depth+1)
					size, entries = size+s, entries+e
				}
			}
		}
		if err != nil || len(names) == 0 {
			return size, entries
		}
	}
}

// mountFS is a mount as one exec's module sees it: diskFull is called when
// a write of the module finds it full.
type mountFS struct {
	experimentalsys.UnimplementedFS
	m        *mount
	diskFull func()
}

var _ experimentalsys.FS = (*mountFS)(nil)

func (s *mountFS) full() experimentalsys.Errno {
	if s.diskFull != nil {
		s.diskFull()
	}
	return experimentalsys.Errno(unix.ENOSPC)
}

// OpenFile opens p, resolved inside the mount.
func (s *mountFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	flags := 0
	switch {
	case flag&experimentalsys.O_RDWR != 0:
		flags = unix.O_RDWR
	case flag&experimentalsys.O_WRONLY != 0:
		flags = unix.O_WRONLY
	}
	for _, f := range []struct {
		o experimentalsys.Oflag
		u int
	}{
		{experimentalsys.O_APPEND, unix.O_APPEND}, {experimentalsys.O_CREAT, unix.O_CREAT},
		{experimentalsys.O_DIRECTORY, unix.O_DIRECTORY}, {experimentalsys.O_DSYNC, unix.O_DSYNC},
		{experimentalsys.O_EXCL, unix.O_EXCL}, {experimentalsys.O_NOFOLLOW, unix.O_NOFOLLOW},
		{experimentalsys.O_SYNC, unix.O_SYNC}, {experimentalsys.O_TRUNC, unix.O_TRUNC},
	} {
		if flag&f.o != 0 {
			flags |= f.u
		}
	}
	if flags&unix.O_CREAT != 0 {
		if errno := s.m.addEntry(); errno != 0 {
			return nil, s.full()
		}
	}
	fd, errno := s.m.openIn(p, flags, uint32(perm.Perm()))
	if errno != 0 {
		return nil, errno
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, experimentalsys.UnwrapOSError(err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		unix.Close(fd) // nothing else can be made here; refuse what got in anyway
		return nil, experimentalsys.EPERM
	}
	f := &file{fs: s, fd: fd, f: os.NewFile(uintptr(fd), p), dir: st.Mode&unix.S_IFMT == unix.S_IFDIR,
		writable: flags&(unix.O_WRONLY|unix.O_RDWR) != 0, append: flags&unix.O_APPEND != 0}
	s.m.mu.Lock()
	s.m.open[f] = struct{}{}
	s.m.mu.Unlock()
	return f, 0
}

// stat describes p, following a final symlink when follow is set.
func (s *mountFS) stat(p string, follow bool) (wazerosys.Stat_t, experimentalsys.Errno) {
	flags := unix.O_PATH
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, errno := s.m.openIn(p, flags, 0)
	if errno != 0 {
		return wazerosys.Stat_t{}, errno
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return wazerosys.Stat_t{}, experimentalsys.UnwrapOSError(err)
	}
	return statOf(&st), 0
}

func (s *mountFS) Lstat(p string) (wazerosys.Stat_t, experimentalsys.Errno) { return s.stat(p, false) }
func (s *mountFS) Stat(p string) (wazerosys.Stat_t, experimentalsys.Errno)  { return s.stat(p, true) }

// atParent runs op on p's parent directory and final name.
func (s *mountFS) atParent(p string, op func(dfd int, name string) error) experimentalsys.Errno {
	dfd, name, errno := s.m.parent(p)
	if errno != 0 {
		return errno
	}
	defer unix.Close(dfd)
	return experimentalsys.UnwrapOSError(op(dfd, name))
}

func (s *mountFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	if s.m.addEntry() != 0 {
		return s.full()
	}
	return s.atParent(p, func(dfd int, name string) error { return unix.Mkdirat(dfd, name, uint32(perm.Perm())) })
}

// viaProc runs op on the path of p's magic link in /proc, p resolved
// inside the mount (following a final symlink inside it): the one way to
// change a file found by an O_PATH descriptor.
func (s *mountFS) viaProc(p string, op func(procPath string) error) experimentalsys.Errno {
	fd, errno := s.m.openIn(p, unix.O_PATH, 0)
	if errno != 0 {
		return errno
	}
	defer unix.Close(fd)
	return experimentalsys.UnwrapOSError(op("/proc/self/fd/" + strconv.Itoa(fd)))
}

func (s *mountFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	return s.viaProc(p, func(pp string) error { return unix.Chmod(pp, uint32(perm.Perm())) })
}

func (s *mountFS) Rename(from, to string) experimentalsys.Errno {
	odfd, oname, errno := s.m.parent(from)
	if errno != 0 {
		return errno
	}
	defer unix.Close(odfd)
	return s.atParent(to, func(dfd int, name string) error { return unix.Renameat(odfd, oname, dfd, name) })
}

func (s *mountFS) Rmdir(p string) experimentalsys.Errno {
	return s.atParent(p, func(dfd int, name string) error { return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR) })
}

func (s *mountFS) Unlink(p string) experimentalsys.Errno {
	return s.atParent(p, func(dfd int, name string) error {
		err := unix.Unlinkat(dfd, name, 0)
		if errors.Is(err, unix.EISDIR) {
			return unix.EPERM // POSIX says EPERM for a directory; wasi-libc expects it
		}
		return err
	})
}

func (s *mountFS) Link(oldPath, newPath string) experimentalsys.Errno {
	if s.m.addEntry() != 0 {
		return s.full()
	}
	odfd, oname, errno := s.m.parent(oldPath)
	if errno != 0 {
		return errno
	}
	defer unix.Close(odfd)
	return s.atParent(newPath, func(dfd int, name string) error { return unix.Linkat(odfd, oname, dfd, name, 0) })
}

func (s *mountFS) Symlink(oldPath, linkName string) experimentalsys.Errno {
	if s.m.addEntry() != 0 {
		return s.full()
	}
	return s.atParent(linkName, func(dfd int, name string) error { return unix.Symlinkat(oldPath, dfd, name) })
}

func (s *mountFS) Readlink(p string) (string, experimentalsys.Errno) {
	var target string
	errno := s.atParent(p, func(dfd int, name string) error {
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dfd, name, buf)
		target = string(buf[:max(n, 0)])
		return err
	})
	return target, errno
}

func (s *mountFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	return s.viaProc(p, func(pp string) error {
		return unix.UtimesNanoAt(unix.AT_FDCWD, pp, times(atim, mtim), 0)
	})
}

// times converts WASI's times (UTIME_OMIT is Linux's) for utimensat.
func times(atim, mtim int64) []unix.Timespec {
	ts := func(t int64) unix.Timespec {
		if t == experimentalsys.UTIME_OMIT {
			return unix.Timespec{Nsec: unix.UTIME_OMIT}
		}
		return unix.NsecToTimespec(t)
	}
	return []unix.Timespec{ts(atim), ts(mtim)}
}

// statOf converts a Linux stat to wazero's.
func statOf(st *unix.Stat_t) wazerosys.Stat_t {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return wazerosys.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Mode: mode, Nlink: uint64(st.Nlink), Size: st.Size,
		Atim: st.Atim.Nano(), Mtim: st.Mtim.Nano(), Ctim: st.Ctim.Nano(),
	}
}

// file is a file or directory a module opened in a mount.
type file struct {
	experimentalsys.UnimplementedFile
	fs       *mountFS
	fd       int
	f        *os.File
	dir      bool
	writable bool
	append   bool
	closed   bool
}

var _ experimentalsys.File = (*file)(nil)

func (f *file) fstat() (wazerosys.Stat_t, experimentalsys.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return wazerosys.Stat_t{}, experimentalsys.UnwrapOSError(err)
	}
	return statOf(&st), 0
}

func (f *file) Dev() (uint64, experimentalsys.Errno) {
	st, errno := f.fstat()
	return st.Dev, errno
}

func (f *file) Ino() (wazerosys.Inode, experimentalsys.Errno) {
	st, errno := f.fstat()
	return st.Ino, errno
}

func (f *file) IsDir() (bool, experimentalsys.Errno)            { return f.dir, 0 }
func (f *file) IsAppend() bool                                  { return f.append }
func (f *file) Stat() (wazerosys.Stat_t, experimentalsys.Errno) { return f.fstat() }
func (f *file) IsNonblock() bool                                { return false }
func (f *file) SetNonblock(bool) experimentalsys.Errno          { return 0 }

func (f *file) SetAppend(enable bool) experimentalsys.Errno {
	fl, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0)
	if err == nil {
		if enable {
			fl |= unix.O_APPEND
		} else {
			fl &^= unix.O_APPEND
		}
		_, err = unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, fl)
	}
	if err == nil {
		f.append = enable
	}
	return experimentalsys.UnwrapOSError(err)
}

func (f *file) Read(buf []byte) (int, experimentalsys.Errno) {
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.Read(buf)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, experimentalsys.UnwrapOSError(err)
}

func (f *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	n, err := f.f.ReadAt(buf, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, experimentalsys.UnwrapOSError(err)
}

func (f *file) Seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	n, err := f.f.Seek(offset, whence)
	return n, experimentalsys.UnwrapOSError(err)
}

func (f *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if !f.dir {
		return nil, experimentalsys.ENOTDIR
	}
	ents, err := f.f.ReadDir(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	out := make([]experimentalsys.Dirent, 0, len(ents))
	for _, e := range ents {
		var st unix.Stat_t
		var ino uint64
		if unix.Fstatat(f.fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			ino = st.Ino
		}
		out = append(out, experimentalsys.Dirent{Name: e.Name(), Ino: ino, Type: e.Type()})
	}
	return out, experimentalsys.UnwrapOSError(err)
}

// write writes buf at off (or at the end when off < 0 and the file
// appends), as far as the mount has room.
func (f *file) write(buf []byte, off int64) (int, experimentalsys.Errno) {
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	if !f.writable {
		return 0, experimentalsys.EBADF
	}
	if len(buf) == 0 {
		return 0, 0
	}
	m := f.fs.m
	m.mu.Lock()
	defer m.mu.Unlock()
	start := off
	if off < 0 {
		var err error
		if f.append {
			var st unix.Stat_t
			err = unix.Fstat(f.fd, &st)
			start = st.Size
		} else {
			start, err = f.f.Seek(0, io.SeekCurrent)
		}
		if err != nil {
			return 0, experimentalsys.UnwrapOSError(err)
		}
	}
	end, errno := m.grow(f.fd, start+int64(len(buf)))
	if errno != 0 {
		return 0, errno
	}
	n := int(max(end-start, 0))
	if n == 0 {
		return 0, f.fs.full()
	}
	var err error
	if off < 0 {
		n, err = f.f.Write(buf[:n])
	} else {
		n, err = f.f.WriteAt(buf[:n], off)
	}
	return n, experimentalsys.UnwrapOSError(err)
}

func (f *file) Write(buf []byte) (int, experimentalsys.Errno) { return f.write(buf, -1) }

func (f *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if off < 0 {
		return 0, experimentalsys.EINVAL
	}
	return f.write(buf, off)
}

func (f *file) Truncate(size int64) experimentalsys.Errno {
	if f.dir {
		return experimentalsys.EISDIR
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	m := f.fs.m
	m.mu.Lock()
	defer m.mu.Unlock()
	end, errno := m.grow(f.fd, size)
	if errno != 0 {
		return errno
	}
	if end < size {
		return f.fs.full()
	}
	return experimentalsys.UnwrapOSError(unix.Ftruncate(f.fd, size))
}

func (f *file) Sync() experimentalsys.Errno { return experimentalsys.UnwrapOSError(f.f.Sync()) }
func (f *file) Datasync() experimentalsys.Errno {
	return experimentalsys.UnwrapOSError(unix.Fdatasync(f.fd))
}

func (f *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	return experimentalsys.UnwrapOSError(unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(f.fd), times(atim, mtim), 0))
}

func (f *file) Close() experimentalsys.Errno {
	m := f.fs.m
	m.mu.Lock()
	if f.closed {
		m.mu.Unlock()
		return 0
	}
	f.closed = true
	delete(m.open, f)
	m.mu.Unlock()
	return experimentalsys.UnwrapOSError(f.f.Close())
}
