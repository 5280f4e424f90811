package agentd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file holds the agent's side of snapshots: walking the writable
// trees (Scan), sending file content (ReadBlobs); restore_linux.go holds
// Apply. Every file operation runs with the workload's identity, below a
// root opened without following symlinks, with O_NOFOLLOW or
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS on every step: a tree the workload
// made (symlink loops, links pointing out) is described, never followed.

// stagingPrefix starts the names of a restore's staging directories at
// the top of each root; scans skip them. writePrefix starts the file API's
// temporary files (fsroot), which are not files yet.
const (
	stagingPrefix = ".airlock-restore-"
	writePrefix   = ".airlock-write-"
)

// snapState is the agent's snapshot state: one snapshot call at a time,
// the digests of files already hashed, and the restores under way (which
// the agent finishes before it exits).
type snapState struct {
	mu    sync.Mutex
	cache map[fileKey]cached
	// commits counts the restores that are changing the trees.
	commits sync.WaitGroup
}

type fileKey struct{ dev, ino uint64 }

// cached is a file's digest, valid while its size, mtime and ctime stay.
type cached struct {
	size         int64
	mtime, ctime int64
	digest       string
}

func newSnapState() *snapState { return &snapState{cache: map[fileKey]cached{}} }

// registerSnapshots adds the snapshot calls to mux.
func (s *server) registerSnapshots(mux *http.ServeMux) {
	o := agent.SnapshotHandlerOptions()
	mux.Handle(agent.ProcScan, s.lazily(func() http.Handler { return connect.NewServerStreamHandlerSimple(agent.ProcScan, s.scan, o...) }))
	mux.Handle(agent.ProcReadBlobs, s.lazily(func() http.Handler {
		return connect.NewServerStreamHandlerSimple(agent.ProcReadBlobs, s.readBlobs, o...)
	}))
	mux.Handle(agent.ProcApply, s.lazily(func() http.Handler { return connect.NewBidiStreamHandler(agent.ProcApply, s.apply, o...) }))
}

// checkRoots validates the roots of a request.
func checkRoots(roots []string) error {
	if len(roots) == 0 || roots[0] != sandbox.Workspace {
		return fmt.Errorf("trees %v: a snapshot holds %s, then optionally /tmp: %w", roots, sandbox.Workspace, sandbox.ErrInvalid)
	}
	for i, r := range roots {
		if !sandbox.ValidRoot(r) || slices.Contains(roots[:i], r) {
			return fmt.Errorf("tree %q: snapshots hold %v, each once: %w", r, sandbox.SnapshotRoots, sandbox.ErrInvalid)
		}
	}
	return nil
}

func (s *server) scan(_ context.Context, req *agent.ScanRequest, stream *connect.ServerStream[agent.ScanChunk]) error {
	if err := checkRoots(req.Roots); err != nil {
		return agent.WireError(err)
	}
	s.snap.mu.Lock()
	defer s.snap.mu.Unlock()
	w := s.newWalker(req.MaxFiles, req.MaxBytes)
	if err := s.walkRoots(w, req.Roots); err != nil {
		return agent.WireError(err)
	}
	for _, b := range agent.EntryBatches(w.entries) {
		if err := stream.Send(&agent.ScanChunk{Entries: b}); err != nil {
			return err
		}
	}
	if len(w.unsettled) > 0 {
		return stream.Send(&agent.ScanChunk{Unsettled: w.unsettled})
	}
	return nil
}

// walkRoots walks each root with w, then sorts what it found.
func (s *server) walkRoots(w *walker, roots []string) error {
	for _, r := range roots {
		err := s.files(func() error {
			return s.root.Within(r, func(fd int) error { return w.walkRoot(fd, r) })
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(w.entries, func(a, b sandbox.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	w.prune()
	return nil
}

// walker walks trees on one thread (the one with the workload's identity).
type walker struct {
	st        *snapState
	entries   []sandbox.TreeEntry
	unsettled []string
	maxFiles  int
	maxBytes  int64
	bytes     int64
	dev       uint64
	rootfd    int
	seen      map[fileKey]bool
	// inos, when set, gets each entry's inode number.
	inos    map[string]uint64
	buf     []byte
	started time.Time
}

func (s *server) newWalker(maxFiles int, maxBytes int64) *walker {
	return &walker{st: s.snap, maxFiles: maxFiles, maxBytes: maxBytes, seen: map[fileKey]bool{}, buf: make([]byte, 256<<10), started: time.Now()}
}

// prune drops the cached digests of files no longer seen.
func (w *walker) prune() {
	for k := range w.st.cache {
		if !w.seen[k] {
			delete(w.st.cache, k)
		}
	}
}

func (w *walker) walkRoot(fd int, root string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", root, err)
	}
	w.dev, w.rootfd = st.Dev, fd
	w.entries = append(w.entries, sandbox.TreeEntry{Path: root, Type: sandbox.EntryDir, Mode: st.Mode & 0o3777})
	return w.walkDir("", root, 0)
}

// walkDir adds the entries below the directory rel (below the root) at
// path. It holds the directory's descriptor only while it reads it, so a
// deep tree costs a few descriptors, not one per level.
func (w *walker) walkDir(rel, path string, depth int) error {
	var fd int
	var err error
	if rel == "" {
		fd, err = unix.Dup(w.rootfd)
	} else {
		fd, err = beneath(w.rootfd, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			// Moved or replaced while the walk went on.
			w.unsettled = append(w.unsettled, path)
			return nil
		}
		return fmt.Errorf("open directory %s: %w", path, explain(err))
	}
	subdirs, err := w.readDir(fd, path, depth)
	unix.Close(fd)
	if err != nil {
		return err
	}
	for _, name := range subdirs {
		r := name
		if rel != "" {
			r = rel + "/" + name
		}
		if err := w.walkDir(r, path+"/"+name, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readDir adds the entries of the directory fd at path, and returns the
// names of its subdirectories.
func (w *walker) readDir(fd int, path string, depth int) ([]string, error) {
	names, err := readNames(fd)
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", path, err)
	}
	var subdirs []string
	for _, name := range names {
		if (depth == 0 && strings.HasPrefix(name, stagingPrefix)) || strings.HasPrefix(name, writePrefix) {
			continue
		}
		p := path + "/" + name
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		if st.Dev != w.dev {
			continue // a mount point: not part of the tree
		}
		if w.maxFiles > 0 && len(w.entries) >= w.maxFiles {
			return nil, fmt.Errorf("more than %d files and directories: the snapshot quota of this key allows no more; remove files (caches, build output) or ask the operator for a larger quota: %w", w.maxFiles, sandbox.ErrLimit)
		}
		e := sandbox.TreeEntry{Path: p, Mode: st.Mode & 0o3777, MTime: st.Mtim.Nano()}
		if w.inos != nil {
			w.inos[p] = st.Ino
		}
		if len(p) > sandbox.MaxTreePath {
			return nil, fmt.Errorf("path %.60s... is longer than %d bytes: %w", p, sandbox.MaxTreePath, sandbox.ErrLimit)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Type, e.Size = sandbox.EntryFile, st.Size
			w.bytes += st.Size
			if w.maxBytes > 0 && w.bytes > w.maxBytes {
				return nil, fmt.Errorf("the files hold more than %d bytes: the snapshot quota of this key allows no more; remove large files or ask the operator for a larger quota: %w", w.maxBytes, sandbox.ErrLimit)
			}
			if err := w.hashAt(fd, name, p, &st, &e); err != nil {
				return nil, err
			}
		case unix.S_IFDIR:
			e.Type = sandbox.EntryDir
			e.MTime = 0
			if depth+1 >= sandbox.MaxTreeDepth {
				return nil, fmt.Errorf("%.80s... is more than %d directories deep: snapshots keep trees up to that depth; flatten it or remove it: %w", p, sandbox.MaxTreeDepth, sandbox.ErrLimit)
			}
			subdirs = append(subdirs, name)
		case unix.S_IFLNK:
			e.Type = sandbox.EntrySymlink
			e.Mode = 0o777
			t, err := readlinkAt(fd, name)
			if err != nil {
				return nil, fmt.Errorf("read symlink %s: %w", p, err)
			}
			e.Target = t
		default:
			return nil, fmt.Errorf("%s is a %s: snapshots keep files, directories and symlinks only; remove it (rm %s) and try again: %w", p, nodeKind(st.Mode), p, sandbox.ErrInvalid)
		}
		w.entries = append(w.entries, e)
	}
	return subdirs, nil
}

// explain turns a permission error into what to do.
func explain(err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w (the workload's user cannot read it: chmod u+rx it)", err)
	}
	return err
}

func nodeKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

// racyWindow: a file changed this recently may change again within the
// same timestamp tick; its digest is not cached.
const racyWindow = 50 * time.Millisecond

// hashAt sets e's digest: from the cache when the file is unchanged,
// else by reading it (again, while it changes under the read).
func (w *walker) hashAt(dirfd int, name, p string, st *unix.Stat_t, e *sandbox.TreeEntry) error {
	k := fileKey{st.Dev, st.Ino}
	w.seen[k] = true
	if c, ok := w.st.cache[k]; ok && c.size == st.Size && c.mtime == st.Mtim.Nano() && c.ctime == st.Ctim.Nano() {
		e.Digest = c.digest
		return nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, explain(err))
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	r, err := readSettled(f, w.buf, io.Discard)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	e.Digest, e.Size, e.MTime = r.digest, r.size, r.mtime
	if r.unsettled {
		w.unsettled = append(w.unsettled, p)
		return nil
	}
	if time.Unix(0, r.ctime).Before(w.started.Add(-racyWindow)) {
		w.st.cache[k] = cached{size: r.size, mtime: r.mtime, ctime: r.ctime, digest: r.digest}
	}
	return nil
}

// settled is what readSettled read.
type settled struct {
	digest             string
	size, mtime, ctime int64
	unsettled          bool
}

// readSettled reads f from the start to out, hashing it, and reads again
// (at most three times more) while its size, mtime or ctime changed under
// the read; out must accept being restarted (it is told by a reset when
// it implements one).
func readSettled(f *os.File, buf []byte, out io.Writer) (settled, error) {
	var r settled
	for try := 0; ; try++ {
		var before, after unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &before); err != nil {
			return r, err
		}
		if before.Mode&unix.S_IFMT != unix.S_IFREG {
			return r, fmt.Errorf("it is no longer a regular file: %w", sandbox.ErrInvalid)
		}
		if try > 0 {
			if rs, ok := out.(interface{ reset() error }); ok {
				if err := rs.reset(); err != nil {
					return r, err
				}
			}
		}
		h := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(h, out), io.NewSectionReader(f, 0, 1<<62), buf)
		if err != nil {
			return r, err
		}
		if err := unix.Fstat(int(f.Fd()), &after); err != nil {
			return r, err
		}
		r = settled{digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), size: n, mtime: after.Mtim.Nano(), ctime: after.Ctim.Nano()}
		same := before.Size == after.Size && before.Mtim == after.Mtim && before.Ctim == after.Ctim && after.Size == n
		if same {
			return r, nil
		}
		if try == 3 {
			r.unsettled = true
			return r, nil
		}
	}
}

// readNames lists the directory fd, sorted. fd stays open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, explain(err)
	}
	d := os.NewFile(uintptr(dup), "dir")
	defer d.Close()
	var names []string
	for {
		n, err := d.Readdirnames(4096)
		names = append(names, n...)
		if err == io.EOF || (err == nil && len(n) == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(names) > 1_000_000 {
			return nil, fmt.Errorf("more than a million entries in one directory: %w", sandbox.ErrLimit)
		}
	}
	slices.Sort(names)
	return names, nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) > sandbox.MaxSymlinkTarget {
			return "", fmt.Errorf("its target is longer than %d bytes: %w", sandbox.MaxSymlinkTarget, sandbox.ErrLimit)
		}
		buf = make([]byte, len(buf)*2)
	}
}

// beneath opens rel below the directory fd, following no symlink and
// crossing no mount point.
func beneath(fd int, rel string, flags int) (int, error) {
	return beneathHow(fd, rel, flags, unix.RESOLVE_NO_XDEV)
}

// openRoot opens the root r (a mount point, often) below the sandbox's
// root directory fd, following no symlink.
func openRoot(fd int, r string) (int, error) {
	return beneathHow(fd, strings.TrimPrefix(r, "/"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

func beneathHow(fd int, rel string, flags int, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolve | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for range 16 {
		nfd, err := unix.Openat2(fd, rel, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return nfd, err
	}
	return -1, unix.EAGAIN
}

// rootOf returns which of roots p is below, and p relative to it.
func rootOf(roots []string, p string) (string, string, bool) {
	for _, r := range roots {
		if rest, ok := strings.CutPrefix(p, r+"/"); ok {
			return r, rest, true
		}
	}
	return "", "", false
}

// chunkSender sends a file's content in ReadBlobs chunks.
type chunkSender struct {
	index  int
	stream *connect.ServerStream[agent.BlobChunk]
	buf    []byte
	sent   bool
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), agent.ChunkSize*8-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == agent.ChunkSize*8 {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkSender) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	c.sent = true
	err := c.stream.Send(&agent.BlobChunk{Index: c.index, Data: c.buf})
	c.buf = c.buf[:0]
	return err
}

// reset starts the file again: the host discards what was sent of it.
func (c *chunkSender) reset() error {
	c.buf = c.buf[:0]
	if !c.sent {
		return nil
	}
	c.sent = false
	return c.stream.Send(&agent.BlobChunk{Index: c.index, Restart: true})
}

func (s *server) readBlobs(_ context.Context, req *agent.ReadBlobsRequest, stream *connect.ServerStream[agent.BlobChunk]) error {
	s.snap.mu.Lock()
	defer s.snap.mu.Unlock()
	for i, ref := range req.Files {
		if _, _, ok := rootOf(sandbox.SnapshotRoots, ref.Path); !ok || (sandbox.TreeEntry{Path: ref.Path, Type: sandbox.EntryFile, Digest: ref.Digest}).Validate(sandbox.SnapshotRoots) != nil {
			return agent.WireError(fmt.Errorf("file %d %q: %w", i, ref.Path, sandbox.ErrInvalid))
		}
	}
	buf := make([]byte, 256<<10)
	// One pass per root, on one thread with the workload's identity.
	i := 0
	for i < len(req.Files) {
		root, _, _ := rootOf(sandbox.SnapshotRoots, req.Files[i].Path)
		err := s.files(func() error {
			return s.root.Within(root, func(dfd int) error {
				for ; i < len(req.Files); i++ {
					ref := req.Files[i]
					r, rel, _ := rootOf(sandbox.SnapshotRoots, ref.Path)
					if r != root {
						return nil
					}
					if err := sendFile(dfd, rel, i, ref.Path, buf, stream); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return agent.WireError(err)
		}
	}
	return nil
}

// sendFile sends the file rel below dfd as file i of a ReadBlobs answer:
// its content, the last chunk carrying what the file was when read.
func sendFile(dfd int, rel string, i int, p string, buf []byte, stream *connect.ServerStream[agent.BlobChunk]) error {
	fd, err := beneath(dfd, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return fmt.Errorf("open %s: %w", p, explain(err))
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	cs := &chunkSender{index: i, stream: stream, buf: make([]byte, 0, agent.ChunkSize*8)}
	res, err := readSettled(f, buf, cs)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	last := &agent.BlobChunk{Index: i, Data: cs.buf, End: true, Digest: res.digest, Size: res.size, MTime: res.mtime, Unsettled: res.unsettled}
	return stream.Send(last)
}
