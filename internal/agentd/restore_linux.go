package agentd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A restore (Apply) makes the trees exactly a snapshot's entries, all or
// nothing:
//
//  1. It walks the trees as they are and plans the change: what to move
//     away (trash), which directories to make, which files and symlinks to
//     put in place, which modes to set.
//  2. It stages everything new in a directory on the same file system at
//     the top of each root (.airlock-restore-TOKEN, skipped by scans):
//     the content of each file the host sends, with its mode and mtime.
//     Running out of room, a broken stream or a bad blob here only
//     removes the staging directory: the trees are as before.
//  3. It writes the plan as a journal into each staging directory; the
//     rename of the first root's journal into place is the commit point.
//  4. It carries the plan out with renames (moves only: nothing can run
//     out of room), then removes the staging directories, the first
//     root's last.
//
// An agent that starts again over trees that outlived it (a workspace on a
// disk) finishes a committed restore and discards one that was not
// (recoverRestores); every step of the plan can be replayed. Once the
// journal is in place the agent finishes the restore even if the host
// goes away, and waits for it before it exits.

// maxApplyEntries bounds the entries of one restore.
const maxApplyEntries = 1_000_000

// op is one step of a restore's plan, relative to its root.
type op struct {
	// Kind is "trash" (move Rel into the staging directory as Name, if it
	// is still the inode Ino), "mkdir", "put" (move Name to Rel) or
	// "chmod".
	Kind string `json:"k"`
	Rel  string `json:"p"`
	Name string `json:"n,omitempty"`
	Ino  uint64 `json:"i,omitempty"`
	Mode uint32 `json:"m,omitempty"`
	// Old is the mode a chmod replaces (for undoing it).
	Old uint32 `json:"o,omitempty"`
}

// journal is what a staging directory's "journal" file holds.
type journal struct {
	Root string `json:"root"`
	Ops  []op   `json:"ops"`
}

// rootPlan is the plan of one root.
type rootPlan struct {
	root  string
	fd    int // the root directory, readable
	stage int // the staging directory
	name  string
	ops   []op
	// puts maps a put op's staged name to its entry.
	puts map[string]sandbox.TreeEntry
}

func (s *server) apply(ctx context.Context, stream *connect.BidiStream[agent.ApplyInput, agent.ApplyEvent]) error {
	roots, target, err := receiveEntries(stream)
	if err != nil {
		return agent.WireError(err)
	}
	s.snap.mu.Lock()
	defer s.snap.mu.Unlock()
	w := s.newWalker(0, 0)
	w.inos = map[string]uint64{}
	if err := s.walkRoots(w, roots); err != nil {
		return agent.WireError(fmt.Errorf("read the trees as they are: %w", err))
	}
	var stats sandbox.ApplyStats
	var plans []*rootPlan
	var need []string
	needIdx := map[string]int{}
	for _, r := range roots {
		p := plan(r, w.entries, w.inos, target, &stats)
		for _, e := range p.puts {
			if e.Type == sandbox.EntryFile {
				if _, ok := needIdx[e.Digest]; !ok {
					needIdx[e.Digest] = len(need)
					need = append(need, e.Digest)
				}
			}
		}
		plans = append(plans, p)
	}
	slices.Sort(need)
	for i, d := range need {
		needIdx[d] = i
	}
	if err := stream.Send(&agent.ApplyEvent{Ready: true, Need: need}); err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return agent.WireError(err)
	}
	var done *sandbox.ApplyStats
	err = s.asWorkload(func(rootfd int) error {
		defer func() {
			for _, p := range plans {
				closeFD(&p.stage)
				closeFD(&p.fd)
			}
		}()
		for _, p := range plans {
			if err := p.open(rootfd, token); err != nil {
				discard(plans)
				return err
			}
		}
		if err := receiveBlobs(stream, plans[0].stage, need, needIdx); err != nil {
			discard(plans)
			return err
		}
		for _, p := range plans {
			if err := p.stagePuts(plans[0].stage, needIdx); err != nil {
				discard(plans)
				return fmt.Errorf("stage %s: %w", p.root, err)
			}
		}
		// From here on the restore is finished whatever the host does.
		s.snap.commits.Add(1)
		defer s.snap.commits.Done()
		if err := commit(plans); err != nil {
			return err
		}
		done = &stats
		return nil
	})
	if err != nil {
		return agent.WireError(err)
	}
	return stream.Send(&agent.ApplyEvent{Done: done})
}

// asWorkload runs f on a thread with the workload's file-system identity,
// with a readable descriptor of the sandbox's root directory.
func (s *server) asWorkload(f func(rootfd int) error) error {
	return s.files(func() error { return s.root.Within("/", f) })
}

func closeFD(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

func randomToken() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// receiveEntries reads and checks the entries of a restore.
func receiveEntries(stream *connect.BidiStream[agent.ApplyInput, agent.ApplyEvent]) ([]string, []sandbox.TreeEntry, error) {
	var roots []string
	var entries []sandbox.TreeEntry
	for first := true; ; first = false {
		m, err := stream.Receive()
		if err != nil {
			return nil, nil, fmt.Errorf("receive the snapshot's entries: %w", err)
		}
		if first {
			roots = m.Roots
			if err := checkRoots(roots); err != nil {
				return nil, nil, err
			}
		}
		entries = append(entries, m.Entries...)
		if len(entries) > maxApplyEntries {
			return nil, nil, fmt.Errorf("more than %d entries: %w", maxApplyEntries, sandbox.ErrLimit)
		}
		if m.EntriesEnd {
			break
		}
	}
	return roots, entries, checkEntries(roots, entries)
}

// checkEntries checks that entries are valid, sorted, unique, hold each
// root as a directory, and each entry's parent as a directory.
func checkEntries(roots []string, entries []sandbox.TreeEntry) error {
	dirs := map[string]bool{}
	for i, e := range entries {
		if err := e.Validate(roots); err != nil {
			return err
		}
		if i > 0 && entries[i-1].Path >= e.Path {
			return fmt.Errorf("entries are not sorted by path at %q: %w", e.Path, sandbox.ErrInvalid)
		}
		if sandbox.ValidRoot(e.Path) {
			if e.Type != sandbox.EntryDir {
				return fmt.Errorf("root %s must be a directory: %w", e.Path, sandbox.ErrInvalid)
			}
		} else if !dirs[path.Dir(e.Path)] {
			return fmt.Errorf("entry %s has no directory %s before it: %w", e.Path, path.Dir(e.Path), sandbox.ErrInvalid)
		}
		if e.Type == sandbox.EntryDir {
			dirs[e.Path] = true
		}
	}
	for _, r := range roots {
		if !dirs[r] {
			return fmt.Errorf("the entries lack root %s: %w", r, sandbox.ErrInvalid)
		}
	}
	return nil
}

// plan works out how to turn the root r's current entries into target's.
func plan(r string, current []sandbox.TreeEntry, inos map[string]uint64, target []sandbox.TreeEntry, stats *sandbox.ApplyStats) *rootPlan {
	rel := func(p string) string {
		if p == r {
			return ""
		}
		return strings.TrimPrefix(p, r+"/")
	}
	under := func(p string) bool { return p == r || strings.HasPrefix(p, r+"/") }
	cur := map[string]sandbox.TreeEntry{}
	for _, e := range current {
		if under(e.Path) {
			cur[e.Path] = e
		}
	}
	tgt := map[string]sandbox.TreeEntry{}
	for _, e := range target {
		if under(e.Path) {
			tgt[e.Path] = e
		}
	}
	p := &rootPlan{root: r, fd: -1, stage: -1, puts: map[string]sandbox.TreeEntry{}}
	var trashed []string // directories moved away whole
	gone := func(q string) bool {
		for _, d := range trashed {
			if strings.HasPrefix(q, d+"/") {
				return true
			}
		}
		return false
	}
	var chmods []op
	for _, c := range current {
		if !under(c.Path) {
			continue
		}
		t, ok := tgt[c.Path]
		if !ok {
			stats.Removed++
		}
		if gone(c.Path) {
			continue
		}
		same := ok && t.Type == c.Type && t.Digest == c.Digest && t.Target == c.Target
		if !same {
			if ok {
				stats.Changed++
			}
			p.ops = append(p.ops, op{Kind: "trash", Rel: rel(c.Path), Name: "t-" + strconv.Itoa(len(p.ops)), Ino: inos[c.Path]})
			if c.Type == sandbox.EntryDir {
				trashed = append(trashed, c.Path)
			}
			continue
		}
		if t.Mode != c.Mode && t.Type != sandbox.EntrySymlink {
			if t.Type == sandbox.EntryFile {
				stats.Changed++
			}
			chmods = append(chmods, op{Kind: "chmod", Rel: rel(c.Path), Mode: t.Mode, Old: c.Mode})
		}
	}
	for _, t := range target {
		if !under(t.Path) {
			continue
		}
		c, ok := cur[t.Path]
		kept := ok && !gone(t.Path) && t.Type == c.Type && t.Digest == c.Digest && t.Target == c.Target
		if kept {
			continue
		}
		if !ok {
			stats.Added++
		}
		switch t.Type {
		case sandbox.EntryDir:
			p.ops = append(p.ops, op{Kind: "mkdir", Rel: rel(t.Path), Mode: 0o700})
			chmods = append(chmods, op{Kind: "chmod", Rel: rel(t.Path), Mode: t.Mode, Old: 0o700})
		default:
			name := "f-" + strconv.Itoa(len(p.ops))
			p.ops = append(p.ops, op{Kind: "put", Rel: rel(t.Path), Name: name})
			p.puts[name] = t
		}
	}
	// Modes last, deepest first: a directory without write permission is
	// filled before it gets its mode.
	slices.Reverse(chmods)
	p.ops = append(p.ops, chmods...)
	return p
}

// open makes the root's staging directory.
func (p *rootPlan) open(rootfd int, token string) error {
	var err error
	p.fd, err = openRoot(rootfd, p.root)
	if err != nil {
		return fmt.Errorf("open %s: %w", p.root, explain(err))
	}
	p.name = stagingPrefix + token
	if err := unix.Mkdirat(p.fd, p.name, 0o700); err != nil {
		return fmt.Errorf("make the staging directory in %s: %w", p.root, roomError(err))
	}
	p.stage, err = unix.Openat(p.fd, p.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the staging directory in %s: %w", p.root, err)
	}
	return nil
}

// roomError says what to do when a tree has no room.
func roomError(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG) {
		return fmt.Errorf("%w: the sandbox has no room for the snapshot's files beside its current ones (a restore needs both at once); remove files or create the sandbox with a larger disk_bytes: %w", err, sandbox.ErrLimit)
	}
	return err
}

// receiveBlobs writes each needed digest's content into stage as b-INDEX,
// checking its digest, until the host says it sent them all.
func receiveBlobs(stream *connect.BidiStream[agent.ApplyInput, agent.ApplyEvent], stage int, need []string, idx map[string]int) error {
	next := 0
	var f *os.File
	var h hash.Hash
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		m, err := stream.Receive()
		if err != nil {
			return fmt.Errorf("receive the snapshot's content: %w", err)
		}
		if m.BlobsEnd {
			if f != nil || next != len(need) {
				return fmt.Errorf("the host sent %d of %d files' content: %w", next, len(need), sandbox.ErrInvalid)
			}
			return nil
		}
		b := m.Blob
		if b == nil {
			continue
		}
		if f == nil {
			if next >= len(need) || b.Digest != need[next] {
				return fmt.Errorf("the host sent content %q out of order: %w", b.Digest, sandbox.ErrInvalid)
			}
			fd, err := unix.Openat(stage, "b-"+strconv.Itoa(idx[b.Digest]), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return roomError(err)
			}
			f, h = os.NewFile(uintptr(fd), b.Digest), sha256.New()
		}
		if _, err := f.Write(b.Data); err != nil {
			return roomError(err)
		}
		h.Write(b.Data)
		if b.End {
			if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != b.Digest {
				return fmt.Errorf("content %s arrived as %s: %w", b.Digest, got, sandbox.ErrInvalid)
			}
			if err := f.Close(); err != nil {
				return roomError(err)
			}
			f = nil
			next++
		}
	}
}

// stagePuts makes each put's file or symlink in p's staging directory,
// from the blobs in blobs (the first root's staging directory).
func (p *rootPlan) stagePuts(blobs int, idx map[string]int) error {
	// The last put of each digest takes the blob itself; others copy it.
	last := map[string]string{}
	for _, o := range p.ops {
		if e, ok := p.puts[o.Name]; ok && e.Type == sandbox.EntryFile {
			last[e.Digest] = o.Name
		}
	}
	for _, o := range p.ops {
		e, ok := p.puts[o.Name]
		if !ok {
			continue
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.MTime), unix.NsecToTimespec(e.MTime)}
		if e.Type == sandbox.EntrySymlink {
			if err := unix.Symlinkat(e.Target, p.stage, o.Name); err != nil {
				return roomError(err)
			}
			_ = unix.UtimesNanoAt(p.stage, o.Name, ts, unix.AT_SYMLINK_NOFOLLOW)
			continue
		}
		blob := "b-" + strconv.Itoa(idx[e.Digest])
		if last[e.Digest] == o.Name && p.stage == blobs {
			if err := unix.Renameat(blobs, blob, p.stage, o.Name); err != nil {
				return err
			}
		} else if err := copyAt(blobs, blob, p.stage, o.Name); err != nil {
			return roomError(err)
		}
		fd, err := unix.Openat(p.stage, o.Name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		err = unix.Fchmod(fd, e.Mode)
		if err == nil {
			err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				err = unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(e.MTime), unix.NsecToTimeval(e.MTime)})
			}
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// copyAt copies the file from/fromName to a new file to/toName.
func copyAt(from int, fromName string, to int, toName string) error {
	src, err := unix.Openat(from, fromName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	sf := os.NewFile(uintptr(src), fromName)
	defer sf.Close()
	dst, err := unix.Openat(to, toName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	df := os.NewFile(uintptr(dst), toName)
	_, err = io.Copy(df, sf)
	if cerr := df.Close(); err == nil {
		err = cerr
	}
	return err
}

// commit writes the journals (the first root's last: its rename is the
// commit point), carries out the plans, and removes the staging
// directories. A step that fails undoes what was done, and the restore
// fails with the trees as they were.
func commit(plans []*rootPlan) error {
	for i := len(plans) - 1; i >= 0; i-- {
		if err := plans[i].writeJournal(); err != nil {
			discard(plans)
			return err
		}
	}
	var undo []func() error
	for i := len(plans) - 1; i >= 0; i-- {
		p := plans[i]
		for _, o := range p.ops {
			u, err := doOp(p.fd, p.stage, o)
			if err != nil {
				// Undo, newest first, then forget the restore.
				for j := len(undo) - 1; j >= 0; j-- {
					_ = undo[j]()
				}
				discard(plans)
				return fmt.Errorf("restore %s/%s: %w (the restore was undone; the trees are as they were)", p.root, o.Rel, err)
			}
			if u != nil {
				undo = append(undo, u)
			}
		}
	}
	for i := len(plans) - 1; i >= 0; i-- {
		plans[i].remove()
	}
	return nil
}

// writeJournal writes the plan into the staging directory, as
// "journal.tmp" then renamed to "journal".
func (p *rootPlan) writeJournal() error {
	b, err := json.Marshal(journal{Root: p.root, Ops: p.ops})
	if err != nil {
		return err
	}
	fd, err := unix.Openat(p.stage, "journal.tmp", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return roomError(err)
	}
	f := os.NewFile(uintptr(fd), "journal")
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return roomError(err)
	}
	if err := unix.Renameat(p.stage, "journal.tmp", p.stage, "journal"); err != nil {
		return err
	}
	return unix.Fsync(p.stage)
}

// discard removes every staging directory, the first root's last.
func discard(plans []*rootPlan) {
	for i := len(plans) - 1; i >= 0; i-- {
		if plans[i].stage >= 0 {
			plans[i].remove()
		}
	}
}

// remove removes p's staging directory.
func (p *rootPlan) remove() {
	_ = removeTree(p.fd, p.name, 0)
}

// parentOf opens the directory that holds rel below root, following no
// symlink, and returns it with rel's last element.
func parentOf(root int, rel string) (int, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		fd, err := unix.Dup(root)
		return fd, base, err
	}
	fd, err := beneath(root, dir, unix.O_PATH|unix.O_DIRECTORY)
	return fd, base, err
}

// doOp carries out o, and returns how to undo it (nil when it changed
// nothing). Each op can be replayed: a trash moves only the inode it
// planned to, a put only a staged file still there.
func doOp(root, stage int, o op) (func() error, error) {
	if o.Rel == "" {
		if o.Kind != "chmod" {
			return nil, fmt.Errorf("%s of the root: %w", o.Kind, sandbox.ErrInvalid)
		}
		if err := unix.Fchmod(root, o.Mode); err != nil {
			return nil, err
		}
		return func() error { return unix.Fchmod(root, o.Old) }, nil
	}
	dfd, base, err := parentOf(root, o.Rel)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	// in runs f in the parent directory again (for undoing).
	in := func(f func(dfd int) error) func() error {
		return func() error {
			dfd, _, err := parentOf(root, o.Rel)
			if err != nil {
				return err
			}
			defer unix.Close(dfd)
			return f(dfd)
		}
	}
	var st unix.Stat_t
	switch o.Kind {
	case "trash":
		if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Ino != o.Ino {
			return nil, nil // already moved, or no longer there
		}
		if err := unix.Renameat(dfd, base, stage, o.Name); err != nil {
			return nil, err
		}
		return in(func(dfd int) error { return unix.Renameat(stage, o.Name, dfd, base) }), nil
	case "mkdir":
		err := unix.Mkdirat(dfd, base, o.Mode)
		if errors.Is(err, unix.EEXIST) {
			if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return nil, nil
			}
			if err := moveAside(dfd, base, stage); err != nil {
				return nil, err
			}
			err = unix.Mkdirat(dfd, base, o.Mode)
		}
		if err != nil {
			return nil, roomError(err)
		}
		return in(func(dfd int) error { return unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR) }), nil
	case "put":
		if err := unix.Fstatat(stage, o.Name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, nil // already put
		}
		err := unix.Renameat(stage, o.Name, dfd, base)
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTDIR) {
			// Something appeared there since the plan: move it aside.
			if err := moveAside(dfd, base, stage); err != nil {
				return nil, err
			}
			err = unix.Renameat(stage, o.Name, dfd, base)
		}
		if err != nil {
			return nil, err
		}
		return in(func(dfd int) error { return unix.Renameat(dfd, base, stage, o.Name) }), nil
	case "chmod":
		if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, nil
		}
		if err := unix.Fchmodat(dfd, base, o.Mode, 0); err != nil {
			return nil, err
		}
		return in(func(dfd int) error { return unix.Fchmodat(dfd, base, o.Old, 0) }), nil
	}
	return nil, fmt.Errorf("journal step %q: %w", o.Kind, sandbox.ErrInvalid)
}

// moveAside moves what is at base in dfd into the staging directory.
func moveAside(dfd int, base string, stage int) error {
	tok, err := randomToken()
	if err != nil {
		return err
	}
	return unix.Renameat(dfd, base, stage, "x-"+tok)
}

// removeTree removes name and everything below it from dfd. It holds a
// descriptor or two at a time, however deep the tree.
func removeTree(dfd int, name string, depth int) error {
	err := unix.Unlinkat(dfd, name, 0)
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	return removeDir(dfd, name, depth)
}

// removeDir empties and removes the directory rel below base.
func removeDir(base int, rel string, depth int) error {
	if depth > sandbox.MaxTreeDepth+8 {
		return fmt.Errorf("%s is too deep to remove: %w", rel, sandbox.ErrLimit)
	}
	fd, err := beneath(base, rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	// A directory without write or search permission is emptied all the same.
	_ = unix.Fchmod(fd, 0o700)
	names, err := readNames(fd)
	var subdirs []string
	for _, n := range names {
		e := unix.Unlinkat(fd, n, 0)
		switch {
		case errors.Is(e, unix.EISDIR):
			subdirs = append(subdirs, n)
		case e != nil && !errors.Is(e, unix.ENOENT):
			err = e
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	for _, sd := range subdirs {
		if err := removeDir(base, rel+"/"+sd, depth+1); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	pfd, last, err := parentOf(base, rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return unix.Unlinkat(pfd, last, unix.AT_REMOVEDIR)
}

// recoverRestores finishes the committed restores a previous agent left
// in the trees, and discards the others. The first root's staging
// directory decides: with its journal, every root's is replayed; without,
// every root's is removed.
func (s *server) recoverRestores() error {
	if s.ids != nil && s.root != nil {
		// gVisor's file operations run on threads of the workload's own
		// (idThreads), four more threads of the Sentry to start: only a
		// root that holds a staging directory needs them. The names are
		// read as the agent, beneath the root and following no symlink.
		left, err := s.restoresLeft()
		if err != nil || !left {
			return err
		}
	}
	return s.asWorkload(func(rootfd int) error {
		fds := map[string]int{}
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		for _, r := range sandbox.SnapshotRoots {
			if fd, err := openRoot(rootfd, r); err == nil {
				fds[r] = fd
			}
		}
		return recoverTrees(fds)
	})
}

// recoverTrees finishes or discards the restores left in the roots, open
// as fds (by root path).
func recoverTrees(fds map[string]int) error {
	tokens := map[string]bool{}
	for _, fd := range fds {
		names, err := readNames(fd)
		if err != nil {
			return err
		}
		for _, n := range names {
			if t, ok := strings.CutPrefix(n, stagingPrefix); ok {
				tokens[t] = true
			}
		}
	}
	for t := range tokens {
		name := stagingPrefix + t
		wsfd, ok := fds[sandbox.SnapshotRoots[0]]
		committed := false
		if ok {
			var st unix.Stat_t
			committed = unix.Fstatat(wsfd, name+"/journal", &st, unix.AT_SYMLINK_NOFOLLOW) == nil
		}
		// The other roots first, the first root last.
		for i := len(sandbox.SnapshotRoots) - 1; i >= 0; i-- {
			fd, ok := fds[sandbox.SnapshotRoots[i]]
			if !ok {
				continue
			}
			if committed {
				if err := replay(fd, name); err != nil {
					return fmt.Errorf("finish the restore in %s: %w", sandbox.SnapshotRoots[i], err)
				}
			}
			_ = removeTree(fd, name, 0)
		}
	}
	return nil
}

// replay carries out the journal of the staging directory name in root.
func replay(root int, name string) error {
	stage, err := unix.Openat(root, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(stage)
	jfd, err := unix.Openat(stage, "journal", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // not this root's: nothing was planned here
	}
	f := os.NewFile(uintptr(jfd), "journal")
	var j journal
	err = json.NewDecoder(io.LimitReader(f, 512<<20)).Decode(&j)
	f.Close()
	if err != nil {
		return fmt.Errorf("read the journal: %w", err)
	}
	for _, o := range j.Ops {
		if _, err := doOp(root, stage, o); err != nil {
			return fmt.Errorf("%s %s: %w", o.Kind, o.Rel, err)
		}
	}
	return nil
}

// restoresLeft says whether a root holds a staging directory of a restore
// an earlier agent left: what recoverRestores then finishes or removes.
func (s *server) restoresLeft() (bool, error) {
	left := false
	err := s.root.Within("/", func(rootfd int) error {
		for _, r := range sandbox.SnapshotRoots {
			fd, err := openRoot(rootfd, r)
			if err != nil {
				continue
			}
			names, err := readNames(fd)
			unix.Close(fd)
			if err != nil {
				return err
			}
			for _, n := range names {
				if strings.HasPrefix(n, stagingPrefix) {
					left = true
					return nil
				}
			}
		}
		return nil
	})
	return left, err
}
