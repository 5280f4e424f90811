package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// unpacker applies layers, one after the other, to a root directory that
// only it writes to. Every entry is placed relative to a descriptor of the
// root: parents are opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS),
// so that no path of a layer can climb out of the root or pass through a
// symlink (one the layer made, or one of an earlier layer), and files are
// made with O_NOFOLLOW|O_EXCL.
type unpacker struct {
	dir     string
	root    *os.File
	lim     Limits
	entries int
	// bytes is the file content written so far (all layers).
	bytes int64
	// seen are the paths this layer has made: an opaque directory hides
	// what earlier layers put in it, not what its own layer does.
	seen map[string]bool
}

func newUnpacker(dir string, lim Limits) (*unpacker, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return &unpacker{dir: dir, root: f, lim: lim.withDefaults()}, nil
}

func (u *unpacker) close() { u.root.Close() }

// layer applies one layer read from r, compressed as its first bytes say
// (gzip, zstd or none), and checks that what r held has the digest want,
// and the tar in it the diff ID diffID (as the image's config lists it).
func (u *unpacker) layer(r io.Reader, want, diffID v1.Hash) error {
	var h hash.Hash
	if want.Algorithm == "sha256" {
		h = sha256.New()
		r = io.TeeReader(r, h)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	var dr io.Reader = br
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		dr = gz
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			return err
		}
		defer zr.Close()
		dr = zr
	}
	// What the tar stream may expand to: the files' bytes, and headers.
	var dh hash.Hash
	if diffID.Algorithm == "sha256" {
		dh = sha256.New()
		dr = io.TeeReader(dr, dh)
	}
	budget := &capReader{r: dr, left: u.lim.MaxTotalBytes - u.bytes + int64(u.lim.MaxEntries)*1024 + 1<<20}
	u.seen = map[string]bool{}
	tr := tar.NewReader(budget)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if budget.hit {
				return fmt.Errorf("the layer expands past %d bytes (a decompression bomb?): %w", u.lim.MaxTotalBytes, ErrRefused)
			}
			return fmt.Errorf("read the layer: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			if budget.hit {
				return fmt.Errorf("entry %q: the layer expands past %d bytes (a decompression bomb?): %w", hdr.Name, u.lim.MaxTotalBytes, ErrRefused)
			}
			return err
		}
	}
	if dh != nil {
		// The tar's end (its padding) is part of what the diff ID covers.
		if _, err := io.Copy(io.Discard, budget); err != nil {
			return fmt.Errorf("read the layer's end: %w", err)
		}
		if got := hex.EncodeToString(dh.Sum(nil)); got != diffID.Hex {
			return fmt.Errorf("the layer's content is sha256:%s, not the diff ID %s of the image's config: %w", got, diffID, ErrRefused)
		}
	}
	if h != nil {
		// The rest of the compressed stream (the tar's padding, the
		// compressor's trailer) is part of what the digest covers.
		if _, err := io.Copy(io.Discard, io.LimitReader(br, 1<<20)); err != nil {
			return fmt.Errorf("read the layer: %w", err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want.Hex {
			return fmt.Errorf("the layer's digest is sha256:%s, not %s: %w", got, want, ErrRefused)
		}
	}
	return nil
}

// capReader reads at most left bytes, then fails.
type capReader struct {
	r    io.Reader
	left int64
	hit  bool
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.left <= 0 {
		c.hit = true
		return 0, errBudget
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= int64(n)
	return n, err
}

var errBudget = errors.New("layer too large")

// refuse is the error for a refused entry, naming it.
func refuse(name, why string) error {
	return fmt.Errorf("entry %q: %s: %w", name, why, ErrRefused)
}

// clean turns an entry's name into a path relative to the root, refusing
// one that is absolute or climbs with "..". "" is the root itself.
func clean(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", refuse(name, "an absolute path")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", refuse(name, "a path with \"..\"")
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	u.entries++
	if u.entries > u.lim.MaxEntries {
		return refuse(hdr.Name, fmt.Sprintf("more than %d entries", u.lim.MaxEntries))
	}
	rel, err := clean(hdr.Name)
	if err != nil {
		return err
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	// Whiteouts (the OCI layer spec): .wh..wh..opq hides what earlier
	// layers put in its directory; .wh.NAME hides NAME.
	if base == ".wh..wh..opq" {
		return u.opaque(hdr.Name, dir)
	}
	if target, ok := strings.CutPrefix(base, ".wh."); ok {
		if target == "" || target == "." || target == ".." || strings.HasPrefix(target, ".wh.") {
			return refuse(hdr.Name, "a whiteout of nothing removable")
		}
		return u.remove(hdr.Name, path.Join(dir, target))
	}
	if rel == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the root itself: its mode stays ours
		}
		return refuse(hdr.Name, "the root is not a directory")
	}
	if strings.HasPrefix(base, ".wh.") {
		return refuse(hdr.Name, "a file named like a whiteout")
	}
	parent, err := u.openDir(hdr.Name, dir, true)
	if err != nil {
		return err
	}
	defer parent.Close()
	pfd := int(parent.Fd())
	mode := uint32(hdr.Mode) & 0o1777 // no setuid, no setgid
	for p := rel; p != "."; p = path.Dir(p) {
		u.seen[p] = true
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return unix.Fchmodat(pfd, base, mode|0o700, 0)
			}
			if err := u.removeAt(hdr.Name, parent, base); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		// The owner (airlock) may always write, so that later layers
		// and removal work.
		return unix.Fchmodat(pfd, base, mode|0o700, 0)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse: //nolint:staticcheck // SA1019: old archives still write TypeRegA, which Go reads as is
		if hdr.Size > u.lim.MaxFileBytes {
			return refuse(hdr.Name, fmt.Sprintf("a file of %d bytes, past the limit of %d", hdr.Size, u.lim.MaxFileBytes))
		}
		if u.bytes+hdr.Size > u.lim.MaxTotalBytes {
			return refuse(hdr.Name, fmt.Sprintf("the image's files pass the limit of %d bytes (a decompression bomb?)", u.lim.MaxTotalBytes))
		}
		if err := u.replace(hdr.Name, parent, base); err != nil {
			return err
		}
		fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		f := os.NewFile(uintptr(fd), base)
		n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
		u.bytes += n
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil {
			err = f.Chmod(os.FileMode(mode&0o777) | sticky(mode))
		}
		if err == nil {
			mt := hdr.ModTime
			err = unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(mt.UnixNano()), unix.NsecToTimeval(mt.UnixNano())})
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if errors.Is(err, errBudget) {
				return err
			}
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return nil
	case tar.TypeSymlink:
		// The target is not checked: it is resolved inside the sandbox,
		// where the root is this directory, and this unpacker never
		// follows a symlink.
		if err := u.replace(hdr.Name, parent, base); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return nil
	case tar.TypeLink:
		trel, err := clean(hdr.Linkname)
		if err != nil || trel == "" {
			return refuse(hdr.Name, fmt.Sprintf("a hard link to %q, outside the image", hdr.Linkname))
		}
		tdir, tbase := path.Split(trel)
		tparent, err := u.openDir(hdr.Name, strings.TrimSuffix(tdir, "/"), false)
		if errors.Is(err, unix.ENOENT) {
			return refuse(hdr.Name, fmt.Sprintf("a hard link to %q, which the image does not have", hdr.Linkname))
		} else if err != nil {
			return err
		}
		defer tparent.Close()
		var st unix.Stat_t
		if err := unix.Fstatat(int(tparent.Fd()), tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return refuse(hdr.Name, fmt.Sprintf("a hard link to %q, which the image does not have", hdr.Linkname))
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return refuse(hdr.Name, "a hard link to a directory")
		}
		if trel == rel {
			return nil
		}
		if err := u.replace(hdr.Name, parent, base); err != nil {
			return err
		}
		if err := unix.Linkat(int(tparent.Fd()), tbase, pfd, base, 0); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		return nil
	case tar.TypeFifo:
		if err := u.replace(hdr.Name, parent, base); err != nil {
			return err
		}
		return unix.Mknodat(pfd, base, unix.S_IFIFO|mode&0o777, 0)
	case tar.TypeChar, tar.TypeBlock:
		return refuse(hdr.Name, "a device node (the sandbox gets its own /dev)")
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return refuse(hdr.Name, fmt.Sprintf("an entry of type %q", hdr.Typeflag))
	}
}

func sticky(mode uint32) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// openDir opens the directory rel beneath the root, refusing any path that
// leaves it or passes through a symlink; name is the entry's, for errors.
// With create, missing directories on the way are made (mode 0755), as a
// layer need not list its entries' parents.
func (u *unpacker) openDir(name, rel string, create bool) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	f, err := u.openBeneath(name, int(u.root.Fd()), rel)
	if !create || !errors.Is(err, unix.ENOENT) {
		return f, err
	}
	// Component by component, each opened beneath the one before.
	cur, err := u.openBeneath(name, int(u.root.Fd()), ".")
	if err != nil {
		return nil, err
	}
	for _, c := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(int(cur.Fd()), c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			cur.Close()
			return nil, fmt.Errorf("entry %q: make its parent %q: %w", name, rel, err)
		}
		next, err := u.openBeneath(name, int(cur.Fd()), c)
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// openBeneath opens the directory rel beneath the directory dirfd, which
// is the root or beneath it.
func (u *unpacker) openBeneath(name string, dirfd int, rel string) (*os.File, error) {
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, refuse(name, fmt.Sprintf("its parent %q is (or passes through) a symlink", rel))
	case errors.Is(err, unix.EXDEV):
		return nil, refuse(name, fmt.Sprintf("its parent %q leaves the root", rel))
	case errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("entry %q: its parent %q is not a directory of the image: %w", name, rel, ErrRefused)
	case err != nil:
		return nil, fmt.Errorf("entry %q: open %q: %w", name, rel, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// replace removes what the root has at base in parent, if anything, so
// that an entry can take its place.
func (u *unpacker) replace(name string, parent *os.File, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(parent.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	return u.removeAt(name, parent, base)
}

// removeAt removes base in parent, a directory with all it holds.
func (u *unpacker) removeAt(name string, parent *os.File, base string) error {
	err := unix.Unlinkat(int(parent.Fd()), base, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		// A directory: parent is a descriptor beneath the root, base one
		// name, and RemoveAll follows no symlink below it.
		err = os.RemoveAll(filepath.Join(fdPath(parent), base)) //nolint:gosec // G305: base is one name, parent a directory opened beneath the root
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("entry %q: remove %q: %w", name, base, err)
	}
	return nil
}

// fdPath names the directory open as f through /proc, so that a path
// beneath it does not depend on the names of its parents.
func fdPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// remove applies a whiteout of rel.
func (u *unpacker) remove(name, rel string) error {
	dir, base := path.Split(rel)
	parent, err := u.openDir(name, strings.TrimSuffix(dir, "/"), false)
	if errors.Is(err, unix.ENOENT) {
		return nil // nothing there to hide
	} else if err != nil {
		return err
	}
	defer parent.Close()
	return u.removeAt(name, parent, base)
}

// opaque empties dir of what earlier layers put in it.
func (u *unpacker) opaque(name, dir string) error {
	d, err := u.openDir(name, dir, true)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("entry %q: %w", name, err)
	}
	for _, n := range names {
		if u.seen[path.Join(dir, n)] {
			continue
		}
		if err := u.removeAt(name, d, n); err != nil {
			return err
		}
	}
	return nil
}

// finish makes the directories every sandbox root needs (/proc, /dev,
// /tmp, /workspace) where the image lacks them, as real directories.
func (u *unpacker) finish() error {
	for _, d := range []string{"proc", "dev", "tmp", "workspace"} {
		var st unix.Stat_t
		err := unix.Fstatat(int(u.root.Fd()), d, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		if err == nil {
			if err := u.removeAt("/"+d, u.root, d); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(int(u.root.Fd()), d, 0o755); err != nil {
			return fmt.Errorf("make /%s: %w", d, err)
		}
	}
	now := time.Now()
	return os.Chtimes(u.dir, now, now)
}
