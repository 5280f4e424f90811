//go:build linux

package cow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// walker walks a directory by descriptors, never following a symlink.
type walker struct {
	ctx   context.Context
	max   int
	count int
	out   []sandbox.TreeEntry
	// links are the paths of files with more than one name (upper walks).
	links map[string]uint64
	// whiteouts, opaque: what the upper layer hides of the lower
	// (upper walks).
	whiteouts []string
	opaque    []string
	// digests, when set, remembers the upper layer's file digests by
	// inode, size and times: listings repeat (the web page polls).
	digests *digestCache
}

// digestCache maps a file's identity (inode, size, mtime, ctime: any
// write changes ctime) to its content digest.
type digestCache struct {
	mu sync.Mutex
	m  map[fileID]string
}

type fileID struct {
	ino, size    uint64
	mtime, ctime int64
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// caches holds a digest cache per layer directory of this process.
var caches sync.Map // dir → *digestCache

func cacheOf(dir string) *digestCache {
	v, _ := caches.LoadOrStore(dir, &digestCache{m: map[fileID]string{}})
	return v.(*digestCache)
}

// forget drops dir's cache (its layer is gone).
func forget(dir string) { caches.Delete(dir) }

func entryType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return sandbox.EntryFile
	case unix.S_IFDIR:
		return sandbox.EntryDir
	case unix.S_IFLNK:
		return sandbox.EntrySymlink
	case unix.S_IFIFO:
		return EntryFIFO
	case unix.S_IFSOCK:
		return EntrySocket
	}
	return EntryDevice
}

// host walks the directory open at fd (which it closes) as the sandbox
// path p.
func (w *walker) host(fd int, p string) ([]sandbox.TreeEntry, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w.out = append(w.out, sandbox.TreeEntry{Path: p, Type: sandbox.EntryDir, Mode: st.Mode & 0o7777})
	if err := w.dir(fd, p, 0, false); err != nil {
		return nil, err
	}
	return w.out, nil
}

// dir walks the children of the directory open at fd (which it closes).
func (w *walker) dir(fd int, p string, depth int, upper bool) error {
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	if depth > maxDepth {
		return fmt.Errorf("%w: %s is more than %d directories deep", sandbox.ErrLimit, p, maxDepth)
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	for _, name := range names {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		w.count++
		if w.count > w.max {
			return fmt.Errorf("%w: more than %d entries; mount a smaller directory", sandbox.ErrLimit, w.max)
		}
		cp := path.Join(p, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone meanwhile
			}
			return fmt.Errorf("stat %s: %w", cp, err)
		}
		e := sandbox.TreeEntry{Path: cp, Type: entryType(st.Mode), Mode: st.Mode & 0o7777}
		switch e.Type {
		case sandbox.EntryFile:
			e.Size = st.Size
			if e.Digest, err = w.digest(fd, name, &st); err != nil {
				return fmt.Errorf("read %s: %w", cp, err)
			}
			if upper && st.Nlink > 1 {
				w.links[cp] = uint64(st.Nlink)
			}
		case sandbox.EntrySymlink:
			if e.Target, err = readlinkAt(fd, name); err != nil {
				return fmt.Errorf("read link %s: %w", cp, err)
			}
		case EntryDevice:
			if upper && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
				w.whiteouts = append(w.whiteouts, cp)
				continue
			}
		}
		w.out = append(w.out, e)
		if e.Type == sandbox.EntryDir {
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", cp, err)
			}
			if upper && isOpaque(cfd) {
				w.opaque = append(w.opaque, cp)
			}
			if err := w.dir(cfd, cp, depth+1, upper); err != nil {
				return err
			}
		}
	}
	return nil
}

// digest is the content digest of name below dfd, whose stat is st.
func (w *walker) digest(dfd int, name string, st *unix.Stat_t) (string, error) {
	if w.digests == nil {
		return digestAt(dfd, name)
	}
	id := idOf(st)
	w.digests.mu.Lock()
	d, ok := w.digests.m[id]
	w.digests.mu.Unlock()
	if ok {
		return d, nil
	}
	d, err := digestAt(dfd, name)
	if err != nil {
		return "", err
	}
	// Kept only when the file did not change while it was read.
	var after unix.Stat_t
	if unix.Fstatat(dfd, name, &after, unix.AT_SYMLINK_NOFOLLOW) == nil && idOf(&after) == id {
		w.digests.mu.Lock()
		if len(w.digests.m) > MaxEntries {
			clear(w.digests.m)
		}
		w.digests.m[id] = d
		w.digests.mu.Unlock()
	}
	return d, nil
}

func isOpaque(fd int) bool {
	buf := make([]byte, 4)
	n, err := unix.Fgetxattr(fd, "trusted.overlay.opaque", buf)
	return err == nil && n >= 1 && buf[0] == 'y'
}

func digestAt(dfd int, name string) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return digestFile(f)
}

func digestFile(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("%w: not a regular file", sandbox.ErrInvalid)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func readlinkAt(dfd int, name string) (string, error) {
	buf := make([]byte, sandbox.MaxSymlinkTarget+1)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	if n > sandbox.MaxSymlinkTarget {
		return "", fmt.Errorf("%w: symlink target longer than %d bytes", sandbox.ErrInvalid, sandbox.MaxSymlinkTarget)
	}
	return string(buf[:n]), nil
}

// merged is the tree the sandbox sees now: base (the manifest) as the
// upper layer open at upperFD (closed here) changes it, and the upper
// layer's files with more than one name.
func merged(ctx context.Context, upperFD int, target string, base []sandbox.TreeEntry, cache *digestCache) ([]sandbox.TreeEntry, map[string]uint64, error) {
	w := &walker{ctx: ctx, max: MaxEntries, links: map[string]uint64{}, digests: cache}
	var st unix.Stat_t
	if err := unix.Fstat(upperFD, &st); err != nil {
		unix.Close(upperFD)
		return nil, nil, err
	}
	root := sandbox.TreeEntry{Path: target, Type: sandbox.EntryDir, Mode: st.Mode & 0o7777}
	if err := w.dir(upperFD, target, 0, true); err != nil {
		return nil, nil, err
	}
	tree := make(map[string]sandbox.TreeEntry, len(base)+len(w.out))
	for _, e := range base {
		tree[e.Path] = e
	}
	below := func(p string) {
		for k := range tree {
			if strings.HasPrefix(k, p+"/") {
				delete(tree, k)
			}
		}
	}
	for _, p := range w.whiteouts {
		delete(tree, p)
		below(p)
	}
	for _, p := range w.opaque {
		below(p)
	}
	for _, e := range w.out {
		// An upper entry that is not a directory hides all of the lower
		// below its path.
		if old, ok := tree[e.Path]; ok && old.Type == sandbox.EntryDir && e.Type != sandbox.EntryDir {
			below(e.Path)
		}
	}
	for _, e := range w.out {
		tree[e.Path] = e
	}
	tree[target] = root
	out := make([]sandbox.TreeEntry, 0, len(tree))
	for _, e := range tree {
		out = append(out, e)
	}
	sortEntries(out)
	return out, w.links, nil
}

// openBeneath opens rel below the directory dfd, refusing any symlink and
// any ".." on the way.
func openBeneath(dfd int, rel string, flags int) (int, error) {
	return unix.Openat2(dfd, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
