//go:build linux

package cow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// locks serialises the operations on each layer of this process.
var locks sync.Map // dir → *sync.Mutex

func lock(dir string) func() {
	v, _ := locks.LoadOrStore(dir, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// state is a layer's record and the tree the sandbox sees now.
type state struct {
	dir   string
	m     *meta
	after []sandbox.TreeEntry
	links map[string]uint64
	diff  *snapshot.Diff
}

func load(ctx context.Context, dir string) (*state, error) {
	m, err := loadMeta(dir)
	if err != nil {
		return nil, err
	}
	ufd, err := unix.Open(upperPath(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the cow layer of %s: %w", m.Target, err)
	}
	after, links, err := merged(ctx, ufd, m.Target, m.Entries, cacheOf(dir))
	if err != nil {
		return nil, fmt.Errorf("read the cow layer of %s: %w", m.Target, err)
	}
	return &state{dir: dir, m: m, after: after, links: links, diff: snapshot.Compare("host", "sandbox", m.Entries, after)}, nil
}

// Changes returns the pending change of the layer in dir, with text diffs
// within lim, each change marked with why an apply would refuse it or
// that the host changed under it.
func Changes(ctx context.Context, dir string, lim snapshot.DiffLimits) (*Pending, error) {
	defer lock(dir)()
	s, err := load(ctx, dir)
	if err != nil {
		return nil, err
	}
	root, err := s.openSource()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	ufd, err := unix.Open(upperPath(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ufd)
	open := func(_ context.Context, e *sandbox.TreeEntry, after bool) (io.ReadCloser, error) {
		rel, _ := relOf(s.m.Target, e.Path)
		dfd := root
		if after {
			dfd = ufd
		}
		fd, err := openBeneath(dfd, rel, unix.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), rel), nil
	}
	if err := s.diff.AddText(ctx, open, lim); err != nil {
		return nil, err
	}
	p := &Pending{Target: s.m.Target, Source: s.m.Source, Changes: make([]Change, 0, len(s.diff.Changes)), Truncated: s.diff.Truncated}
	refused := s.refusals(s.listingTrees())
	for _, c := range s.diff.Changes {
		ch := Change{Change: c, Refused: refused[c.Path], Entry: EntryDigest(c.After), Warning: Warning(c.After, false)}
		ch.Conflict = s.conflict(root, c)
		p.Changes = append(p.Changes, ch)
	}
	return p, nil
}

// Count is the number of pending changes of the layer in dir.
func Count(ctx context.Context, dir string) (int, error) {
	defer lock(dir)()
	s, err := load(ctx, dir)
	if err != nil {
		return 0, err
	}
	return len(s.diff.Changes), nil
}

// Info says which host directory and sandbox path the layer in dir is.
func Info(dir string) (source, target string, err error) {
	m, err := loadMeta(dir)
	if err != nil {
		return "", "", err
	}
	return m.Source, m.Target, nil
}

// openSource opens the host directory, checking it is the one the
// sandbox started with.
func (s *state) openSource() (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, s.m.Source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("open the host directory %s: %w", s.m.Source, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != s.m.Dev || st.Ino != s.m.Ino {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: the host directory %s was replaced since the sandbox started: nothing is applied; discard the changes", sandbox.ErrInvalid, s.m.Source)
	}
	return fd, nil
}

// refusals says, by path, why an apply refuses each change it refuses;
// t are the trees before and after the apply, in which each symlink's
// target is walked (linkRefusals).
func (s *state) refusals(t trees) map[string]string {
	out := linkRefusals(t)
	for _, c := range s.diff.Changes {
		rel, _ := relOf(s.m.Target, c.Path)
		if r := s.refusal(c, rel); r != "" {
			out[c.Path] = r
		}
	}
	// What lies below a refused directory is refused with it.
	for _, c := range s.diff.Changes {
		if _, ok := out[c.Path]; ok {
			continue
		}
		for p := path.Dir(c.Path); p != s.m.Target && p != "/" && p != "."; p = path.Dir(p) {
			if r, ok := out[p]; ok && !strings.HasPrefix(r, "its directory") {
				out[c.Path] = "its directory " + quote(p) + " is refused"
				break
			}
		}
	}
	return out
}

func (s *state) refusal(c snapshot.Change, rel string) string {
	if rel != "." {
		if r := CheckName(rel); r != "" {
			return r
		}
	}
	a := c.After
	if a == nil {
		return ""
	}
	switch a.Type {
	case sandbox.EntryFile:
		if n := s.links[c.Path]; n > 1 {
			return fmt.Sprintf("a hard link (%d names in the sandbox): apply never links host files; copy it in the sandbox (cp --remove-destination) to apply it as a file of its own", n)
		}
	case sandbox.EntryDir:
	case sandbox.EntrySymlink:
		t := a.Target
		if strings.HasPrefix(t, "/") {
			return "a symlink to the absolute path " + quote(t) + ": apply makes only symlinks that stay inside the mounted directory (use a relative target)"
		}
		if t == "" || strings.IndexFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return "a symlink whose target is empty or holds a control character"
		}
		// Where a relative target leads is walked in the tree after the
		// apply (linkRefusals), not read lexically here.
	default:
		return "a " + a.Type + ": apply never makes device files, FIFOs or sockets"
	}
	return ""
}

func quote(p string) string {
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%q", p)
	}
	return p
}

// hostEntry is what the host directory holds at rel now: nil when absent.
func hostEntry(root int, rel string) (*sandbox.TreeEntry, error) {
	if rel == "." {
		var st unix.Stat_t
		if err := unix.Fstat(root, &st); err != nil {
			return nil, err
		}
		return &sandbox.TreeEntry{Type: sandbox.EntryDir, Mode: st.Mode & 0o7777}, nil
	}
	dfd, err := openBeneath(root, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	name := path.Base(rel)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	e := &sandbox.TreeEntry{Type: entryType(st.Mode), Mode: st.Mode & 0o7777, Size: st.Size}
	switch e.Type {
	case sandbox.EntryFile:
		// O_PATH directories cannot be read through: reopen the parent.
		rfd, err := openBeneath(root, path.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		defer unix.Close(rfd)
		if e.Digest, err = digestAt(rfd, name); err != nil {
			return nil, err
		}
	case sandbox.EntrySymlink:
		if e.Target, err = readlinkAt(dfd, name); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// added names an entry of the host directory rel (the sandbox's path p)
// that the manifest does not have; "" when there is none.
func (s *state) added(root int, rel, p string) string {
	known := map[string]bool{}
	for _, e := range s.m.Entries {
		if path.Dir(e.Path) == p {
			known[path.Base(e.Path)] = true
		}
	}
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if !known[n] {
			return path.Join(rel, n)
		}
	}
	return ""
}

// same says the host's entry now is what the manifest recorded (type,
// content, symlink target; not modes or times).
func same(now, then *sandbox.TreeEntry) bool {
	if now == nil || then == nil {
		return now == nil && then == nil
	}
	return now.Type == then.Type && now.Digest == then.Digest && now.Target == then.Target
}

// conflict says why the host's entry at c's path is no longer what the
// sandbox started with; "" when it is.
func (s *state) conflict(root int, c snapshot.Change) string {
	rel, _ := relOf(s.m.Target, c.Path)
	now, err := hostEntry(root, rel)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return "a symlink on the host is in the way"
		}
		return "cannot read the host's file: " + err.Error()
	}
	if same(now, c.Before) {
		if c.Before != nil && c.Before.Type == sandbox.EntryDir && (c.After == nil || c.After.Type != sandbox.EntryDir) {
			// A directory the sandbox removed: the host must not have
			// put anything new in it.
			if extra := s.added(root, rel, c.Path); extra != "" {
				return "the host made " + quote(extra) + " in it since the sandbox started"
			}
		}
		return ""
	}
	switch {
	case c.Before == nil:
		return "the host made " + quote(rel) + " since the sandbox started"
	case now == nil:
		return "the host removed " + quote(rel) + " since the sandbox started"
	default:
		return "the host changed " + quote(rel) + " since the sandbox started"
	}
}
