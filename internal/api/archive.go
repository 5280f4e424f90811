package api

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ArchiveLimits bound one tar archive, uploaded or downloaded.
type ArchiveLimits struct {
	// MaxEntries is the number of entries. 10000.
	MaxEntries int
	// MaxFileBytes is the size of one file. 256 MiB.
	MaxFileBytes int64
	// MaxTotalBytes is the size of all files together. 1 GiB.
	MaxTotalBytes int64
}

// DefaultArchiveLimits are the limits of a zero ArchiveLimits.
var DefaultArchiveLimits = ArchiveLimits{MaxEntries: 10000, MaxFileBytes: 256 << 20, MaxTotalBytes: 1 << 30}

func (l ArchiveLimits) withDefaults() ArchiveLimits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultArchiveLimits.MaxEntries
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultArchiveLimits.MaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultArchiveLimits.MaxTotalBytes
	}
	return l
}

// EntryKind is what an accepted archive entry makes.
type EntryKind string

const (
	EntryFile    EntryKind = "file"
	EntryDir     EntryKind = "dir"
	EntrySymlink EntryKind = "symlink"
	// EntrySkip is an entry with nothing to make (a global PAX header, or
	// the archive's own "." directory).
	EntrySkip EntryKind = "skip"
)

// Entry is an archive entry the checker accepted.
type Entry struct {
	// Name is clean and relative to the extraction directory, never "..",
	// never absolute.
	Name string
	Kind EntryKind
	// Target is a symlink's target, relative, resolving inside the
	// extraction directory.
	Target string
	Size   int64
	// Mode holds permission bits only (no setuid, setgid or sticky).
	Mode fs.FileMode
}

// ArchiveError says why an archive entry was refused.
type ArchiveError struct {
	Entry  string
	Reason string
}

func (e *ArchiveError) Error() string {
	return fmt.Sprintf("archive entry %s: %s", strconv.Quote(truncate(e.Entry, 200)), e.Reason)
}

// ArchiveChecker checks the entries of one tar archive in order. It is a
// pure function of the headers it is given: it refuses absolute names,
// ".." components, entries below or replacing a symlink the archive made,
// symlinks whose target leaves the extraction directory (by "..", an
// absolute path or another symlink of the archive), hard links, device
// files and FIFOs, and entries past the size and count limits.
//
// It is defence in depth: the sandbox's agent resolves every path inside
// the sandbox's own root, so even an entry that slipped through could not
// reach the host.
//
// Its cost is linear in the length of each name and target: prefixes are
// looked up by an FNV-1a hash carried along the name, not by joining
// strings, so deep paths cannot make an upload quadratic.
type ArchiveChecker struct {
	limits  ArchiveLimits
	entries int
	total   int64
	links   map[uint64][]string // symlinks the archive made, by pathHash
	seen    map[string]bool     // every name made so far
}

// NewArchiveChecker returns a checker for one archive.
func NewArchiveChecker(l ArchiveLimits) *ArchiveChecker {
	return &ArchiveChecker{limits: l.withDefaults(), links: map[uint64][]string{}, seen: map[string]bool{}}
}

// FNV-1a, 64 bits: the hash of a path is carried along it byte by byte, so
// the hash of every prefix comes for free.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// isLink says p, whose pathHash is h, is a symlink the archive made.
func (c *ArchiveChecker) isLink(h uint64, p func() string) bool {
	cands := c.links[h]
	if len(cands) == 0 {
		return false
	}
	s := p()
	for _, x := range cands {
		if x == s {
			return true
		}
	}
	return false
}

// linkPrefix returns the first prefix of name (itself included) that is a
// symlink the archive made, or "".
func (c *ArchiveChecker) linkPrefix(name string) string {
	h := uint64(fnvOffset)
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '/' {
			if c.isLink(h, func() string { return name[:i] }) {
				return name[:i]
			}
		}
		if i < len(name) {
			h = (h ^ uint64(name[i])) * fnvPrime
		}
	}
	return ""
}

// Check checks the next header and returns what to make of it.
func (c *ArchiveChecker) Check(h *tar.Header) (Entry, error) {
	refuse := func(format string, args ...any) (Entry, error) {
		return Entry{}, &ArchiveError{Entry: h.Name, Reason: fmt.Sprintf(format, args...)}
	}
	if h.Typeflag == tar.TypeXGlobalHeader {
		return Entry{Kind: EntrySkip}, nil
	}
	c.entries++
	if c.entries > c.limits.MaxEntries {
		return refuse("the archive has more than %d entries", c.limits.MaxEntries)
	}
	raw := h.Name
	switch {
	case raw == "":
		return refuse("empty name")
	case len(raw) > maxPath:
		return refuse("name longer than %d bytes", maxPath)
	case strings.IndexByte(raw, 0) >= 0:
		return refuse("name contains a NUL byte")
	case strings.HasPrefix(raw, "/"):
		return refuse("absolute name; archives must hold relative paths")
	}
	for _, part := range strings.Split(raw, "/") {
		if part == ".." {
			return refuse("name contains \"..\"")
		}
	}
	name := path.Clean(raw)
	var e Entry
	switch h.Typeflag {
	case tar.TypeReg, '\x00':
		e.Kind = EntryFile
	case tar.TypeDir:
		e.Kind = EntryDir
	case tar.TypeSymlink:
		e.Kind = EntrySymlink
	case tar.TypeLink:
		return refuse("hard links are not allowed")
	case tar.TypeChar, tar.TypeBlock:
		return refuse("device files are not allowed")
	case tar.TypeFifo:
		return refuse("FIFOs are not allowed")
	default:
		return refuse("entry type %q is not allowed; use files, directories and symlinks", string(h.Typeflag))
	}
	if name == "." {
		if e.Kind == EntryDir {
			return Entry{Kind: EntrySkip}, nil
		}
		return refuse("a %s cannot replace the extraction directory", e.Kind)
	}
	// No entry may pass through, or replace, a symlink the archive made.
	if p := c.linkPrefix(name); p == name {
		return refuse("replaces the symlink %q made earlier in the archive", truncate(p, 200))
	} else if p != "" {
		return refuse("goes through the symlink %q made earlier in the archive", truncate(p, 200))
	}
	if e.Kind == EntrySymlink && c.seen[name] {
		return refuse("a symlink cannot replace an entry made earlier in the archive")
	}
	if h.Size < 0 {
		return refuse("negative size")
	}
	if e.Kind == EntryFile {
		if h.Size > c.limits.MaxFileBytes {
			return refuse("file of %d bytes; at most %d are allowed", h.Size, c.limits.MaxFileBytes)
		}
		c.total += h.Size
		if c.total > c.limits.MaxTotalBytes {
			return refuse("the archive's files pass %d bytes together", c.limits.MaxTotalBytes)
		}
		e.Size = h.Size
	}
	if e.Kind == EntrySymlink {
		t := h.Linkname
		switch {
		case t == "":
			return refuse("symlink with an empty target")
		case len(t) > maxPath || strings.IndexByte(t, 0) >= 0:
			return refuse("symlink target too long or holding NUL")
		case strings.HasPrefix(t, "/"):
			return refuse("symlink to an absolute path; links must stay inside the archive")
		}
		// Walk the target from the link's directory; it may neither climb
		// above the extraction directory nor pass through another symlink.
		// cur holds the components walked so far and hs the pathHash of
		// each prefix of them.
		parts := strings.Split(name, "/")
		cur := parts[: len(parts)-1 : len(parts)-1]
		hs := make([]uint64, 0, len(cur))
		for i, comp := range cur {
			h := uint64(fnvOffset)
			if i > 0 {
				h = fnvAdd(hs[i-1], "/")
			}
			hs = append(hs, fnvAdd(h, comp))
		}
		for _, comp := range strings.Split(t, "/") {
			switch comp {
			case "", ".":
			case "..":
				if len(cur) == 0 {
					return refuse("symlink points outside the extraction directory")
				}
				cur, hs = cur[:len(cur)-1], hs[:len(hs)-1]
			default:
				h := uint64(fnvOffset)
				if len(hs) > 0 {
					h = fnvAdd(hs[len(hs)-1], "/")
				}
				cur, hs = append(cur, comp), append(hs, fnvAdd(h, comp))
				if c.isLink(hs[len(hs)-1], func() string { return strings.Join(cur, "/") }) {
					return refuse("symlink target goes through another symlink of the archive")
				}
			}
		}
		e.Target = t
		h := fnvAdd(fnvOffset, name)
		c.links[h] = append(c.links[h], name)
	}
	e.Name = name
	e.Mode = fs.FileMode(h.Mode).Perm()
	c.seen[name] = true
	return e, nil
}

// ArchiveResult is the body of PUT …/archive.
type ArchiveResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// archiveDir reads the path query parameter; empty means /workspace.
func archiveDir(r *http.Request) (string, error) {
	if r.URL.Query().Get("path") == "" {
		return sandbox.Workspace, nil
	}
	return queryPath(r, "path")
}

// uploadArchive extracts a tar archive into the directory path, checking
// every entry before anything of it is written.
func (s *Server) uploadArchive(w http.ResponseWriter, r *http.Request, c *caller) error {
	dir, err := archiveDir(r)
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	lim := s.opts.Archive
	body := http.MaxBytesReader(w, r.Body, lim.MaxTotalBytes+int64(lim.MaxEntries)*3*512+1<<20)
	tr := tar.NewReader(body)
	chk := NewArchiveChecker(lim)
	ctx := r.Context()
	if err := f.Mkdir(ctx, dir, 0o755); err != nil {
		return err
	}
	made := map[string]bool{dir: true}
	mkdirAll := func(p string) error {
		if made[p] {
			return nil
		}
		if err := f.Mkdir(ctx, p, 0o755); err != nil {
			return err
		}
		made[p] = true
		return nil
	}
	var res ArchiveResult
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return err
			}
			return &Error{Status: http.StatusBadRequest, Code: "bad_archive", Message: "not a valid tar archive: " + truncate(err.Error(), 200)}
		}
		e, err := chk.Check(h)
		if err != nil {
			return &Error{Status: http.StatusBadRequest, Code: "archive_refused", Message: err.Error() + fmt.Sprintf(" (%d entries before it were extracted)", res.Entries)}
		}
		dest := path.Join(dir, e.Name)
		switch e.Kind {
		case EntrySkip:
			continue
		case EntryDir:
			if err := f.Mkdir(ctx, dest, e.Mode|0o700); err != nil {
				return err
			}
			made[dest] = true
		case EntryFile:
			if err := mkdirAll(path.Dir(dest)); err != nil {
				return err
			}
			if err := f.WriteFile(ctx, dest, io.LimitReader(tr, e.Size), e.Mode); err != nil {
				return err
			}
			res.Bytes += e.Size
		case EntrySymlink:
			if err := mkdirAll(path.Dir(dest)); err != nil {
				return err
			}
			if err := f.Symlink(ctx, e.Target, dest); err != nil {
				if errors.Is(err, sandbox.ErrExists) {
					return &Error{Status: http.StatusConflict, Code: "archive_refused", Message: fmt.Sprintf("archive entry %q: cannot make the symlink: something exists at its path", truncate(e.Name, 200))}
				}
				return err
			}
		}
		res.Entries++
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// downloadArchive sends the file or directory tree at path as a tar
// archive; symlinks are stored as symlinks, not followed. Files are
// streamed from the sandbox, never held whole in the daemon's memory; the
// route holds one of the key's in-flight slots (see routes) while it runs.
func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request, c *caller) error {
	root, err := archiveDir(r)
	if err != nil {
		return err
	}
	f, done, err := s.files(r, c)
	if err != nil {
		return err
	}
	defer done()
	ctx := r.Context()
	fi, err := f.Stat(ctx, root)
	if err != nil {
		return err
	}
	lim := s.opts.Archive
	lw := &lazyWriter{w: w}
	w.Header().Set("Content-Type", "application/x-tar")
	tw := tar.NewWriter(lw)
	var n int
	var total int64
	// add adds the file fi found at p in the sandbox, as name.
	var add func(fi sandbox.FileInfo, p, name string) error
	add = func(fi sandbox.FileInfo, p, name string) error {
		n++
		if n > lim.MaxEntries {
			return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: fmt.Sprintf("more than %d entries; download a smaller directory", lim.MaxEntries)}
		}
		h := &tar.Header{Name: name, Mode: int64(fi.Mode.Perm()), ModTime: fi.ModTime.Truncate(time.Second), Format: tar.FormatPAX}
		switch fi.Type {
		case "dir":
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			ents, err := f.ReadDir(ctx, p)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if err := add(e, path.Join(p, e.Name), path.Join(name, e.Name)); err != nil {
					return err
				}
			}
			return nil
		case "symlink":
			h.Typeflag, h.Linkname = tar.TypeSymlink, fi.Target
			return tw.WriteHeader(h)
		case "file":
			if fi.Size > lim.MaxFileBytes || total+fi.Size > lim.MaxTotalBytes {
				return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: fmt.Sprintf("file %q is past the archive's size limits; download it on its own", truncate(name, 200))}
			}
			// Streamed: the header takes the size Stat saw, the body is
			// copied from the sandbox as it comes. A file that changes size
			// meanwhile breaks the archive (the tar writer refuses a body
			// of another length) and the download is cut off.
			total += fi.Size
			h.Typeflag, h.Size = tar.TypeReg, fi.Size
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if fi.Size == 0 {
				return nil
			}
			cw := &countWriter{w: tw}
			if err := f.ReadFile(ctx, p, 0, fi.Size, cw); err != nil {
				return err
			}
			if cw.n != fi.Size {
				return fmt.Errorf("file %q changed size during the download (%d bytes, then %d)", name, fi.Size, cw.n)
			}
			return nil
		}
		n-- // sockets, FIFOs and devices are left out
		return nil
	}
	name := path.Base(root)
	if fi.Type == "dir" {
		name = "."
	}
	err = add(fi, root, name)
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		if !lw.started {
			return err
		}
		s.log.Warn("download archive: stream broke", "err", err)
		panic(http.ErrAbortHandler)
	}
	if !lw.started {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}
