//go:build linux

package cow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// journal is what an apply writes before it touches the host: the
// changes it is about to make, so that the next start after a crash can
// say which it made.
type journal struct {
	Sandbox string    `json:"sandbox"`
	Source  string    `json:"source"`
	Target  string    `json:"target"`
	Started time.Time `json:"started"`
	// Pid and PidStart name the process that applies: while it lives,
	// the apply is not interrupted (another airlock sharing the state
	// directory must leave it alone).
	Pid      int           `json:"pid,omitempty"`
	PidStart uint64        `json:"pid_start,omitempty"`
	Plan     []journalStep `json:"plan"`
}

type journalStep struct {
	Path   string             `json:"path"`
	Kind   string             `json:"kind"`
	Before *sandbox.TreeEntry `json:"before,omitempty"`
	After  *sandbox.TreeEntry `json:"after,omitempty"`
}

// choose returns the changes sel picks (nil: all), with the directories
// they need made first.
func (s *state) choose(sel []string) []snapshot.Change {
	by := map[string]snapshot.Change{}
	for _, c := range s.diff.Changes {
		by[c.Path] = c
	}
	pick := map[string]bool{}
	for _, c := range s.diff.Changes {
		if !selected(sel, c.Path) {
			continue
		}
		pick[c.Path] = true
		if c.After == nil {
			continue
		}
		for p := path.Dir(c.Path); p != s.m.Target && p != "/" && p != "."; p = path.Dir(p) {
			if a, ok := by[p]; ok && a.After != nil && a.After.Type == sandbox.EntryDir && (a.Before == nil || a.Before.Type != sandbox.EntryDir) {
				pick[p] = true
			}
		}
	}
	var out []snapshot.Change
	for _, c := range s.diff.Changes {
		if pick[c.Path] {
			out = append(out, c)
		}
	}
	return out
}

// Apply writes the pending changes at paths (relative to the mount's root
// or absolute in the sandbox; a directory stands for all below it; none:
// every change) into the host directory. Paths apply refuses (see
// Change.Refused) are listed in the result and left alone. When the host
// changed under any other chosen path since the sandbox started, nothing
// is applied and the error is a *ConflictError. Each file is written to a
// temporary file beside it, synced and renamed over the old one: a crash
// leaves it old or new.
func Apply(ctx context.Context, dir string, paths []string) (*ApplyResult, error) {
	return ApplyWith(ctx, dir, ApplyOptions{Paths: paths})
}

// ApplyReviewed is Apply of what a person saw: expect maps paths (as
// Apply's) to the entry each change showed (Change.Entry: EntryDigest of
// its after entry, "" for a deletion). A chosen path whose change is no
// longer that entry (type, mode, size, content, symlink target) is a
// conflict (nothing is applied), and the host gets the reviewed entry: a
// file whose content changes while it is copied, or a link whose target
// changes, is not written.
func ApplyReviewed(ctx context.Context, dir string, paths []string, expect map[string]string) (*ApplyResult, error) {
	return ApplyWith(ctx, dir, ApplyOptions{Paths: paths, Expect: expect})
}

// ApplyWith is Apply with o's choices (ApplyReviewed's expect, the
// policy's shared-write opt-in).
func ApplyWith(ctx context.Context, dir string, o ApplyOptions) (*ApplyResult, error) {
	paths, expect := o.Paths, o.Expect
	defer lock(dir)()
	s, err := load(ctx, dir)
	if err != nil {
		return nil, err
	}
	var sel []string
	if len(paths) > 0 {
		if sel, err = normalize(s.m.Target, paths); err != nil {
			return nil, err
		}
	}
	want := map[string]string{}
	for p, d := range expect {
		n, err := normalize(s.m.Target, []string{p})
		if err != nil {
			return nil, err
		}
		if d != "" && !validEntryDigest(d) {
			if sandbox.ValidDigest(d) {
				return nil, fmt.Errorf("%w: expected %q for %s is a content digest: send the change's entry (%q in the listing), which covers its type, mode and symlink target too", sandbox.ErrInvalid, d, p, "entry")
			}
			return nil, fmt.Errorf("%w: expected entry %q of %s: give the change's entry (%s and 64 hex digits), or \"\" for a deletion", sandbox.ErrInvalid, d, p, entryPrefix)
		}
		want[n[0]] = d
	}
	root, err := s.openSource()
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	chosen := s.choose(sel)
	if sel != nil && len(chosen) == 0 {
		return nil, fmt.Errorf("%w: no pending change at %s; list them with `airlock sandbox changes`", sandbox.ErrNotFound, strings.Join(sel, ", "))
	}
	res := &ApplyResult{Target: s.m.Target, Applied: []Applied{}, Refused: []Refusal{}}
	refused := s.refusals(s.applyTrees(root, chosen))
	var todo []snapshot.Change
	var conflicts []Refusal
	for _, c := range chosen {
		if r := refused[c.Path]; r != "" {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: r})
			continue
		}
		if r := s.conflict(root, c); r != "" {
			conflicts = append(conflicts, Refusal{Path: c.Path, Reason: r})
		} else if d, ok := want[c.Path]; ok && d != EntryDigest(c.After) {
			conflicts = append(conflicts, Refusal{Path: c.Path, Reason: "the sandbox changed it after it was shown (it is now " + describe(c.After) + "): list the changes again and review it"})
		}
		todo = append(todo, c)
	}
	for p := range want {
		if !slices.ContainsFunc(chosen, func(c snapshot.Change) bool { return c.Path == p }) {
			conflicts = append(conflicts, Refusal{Path: p, Reason: "it is no longer a pending change (the sandbox undid it, or it was applied or discarded): list the changes again"})
		}
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{Target: s.m.Target, Conflicts: conflicts}
	}
	if len(todo) == 0 {
		return res, nil
	}
	j := journal{Sandbox: s.m.Sandbox, Source: s.m.Source, Target: s.m.Target, Started: time.Now().UTC(), Pid: os.Getpid()}
	j.PidStart, _ = procid.StartTime(j.Pid)
	for _, c := range todo {
		j.Plan = append(j.Plan, journalStep{Path: c.Path, Kind: c.Kind, Before: c.Before, After: c.After})
	}
	if err := writeAtomic(journalPath(dir), j); err != nil {
		return nil, fmt.Errorf("write the apply's journal: %w", err)
	}
	ufd, err := unix.Open(upperPath(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ufd)
	a := &applier{s: s, root: root, upper: ufd, entries: map[string]sandbox.TreeEntry{}, sharedWrite: o.SharedWrite}
	for _, e := range s.m.Entries {
		a.entries[e.Path] = e
	}
	failed := map[string]bool{}
	// Removals first, deepest first: deleted paths, and what a change of
	// type to or from a directory replaces.
	for i := len(todo) - 1; i >= 0; i-- {
		c := todo[i]
		if !a.removes(c) {
			continue
		}
		if err := a.remove(c); err != nil {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: err.Error()})
			failed[c.Path] = true
			continue
		}
		if c.After == nil {
			res.Applied = append(res.Applied, Applied{Path: c.Path, Kind: c.Kind, Before: c.Before.Digest})
		}
	}
	// Then what is made or changed, shallowest first.
	for _, c := range todo {
		if c.After == nil || failed[c.Path] {
			continue
		}
		if p := a.failedAncestor(failed, c.Path); p != "" {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: "its directory " + quote(p) + " could not be applied"})
			failed[c.Path] = true
			continue
		}
		ap, err := a.put(ctx, c)
		if err != nil {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: err.Error()})
			failed[c.Path] = true
			continue
		}
		res.Applied = append(res.Applied, ap)
	}
	slices.SortFunc(res.Applied, func(x, y Applied) int { return strings.Compare(x.Path, y.Path) })
	s.m.Entries = s.m.Entries[:0]
	for _, e := range a.entries {
		s.m.Entries = append(s.m.Entries, e)
	}
	sortEntries(s.m.Entries)
	if err := s.m.save(dir); err != nil {
		return res, fmt.Errorf("applied, but keeping the record failed (the next listing may show applied paths as conflicts): %w", err)
	}
	if err := os.Remove(journalPath(dir)); err != nil {
		return res, err
	}
	return res, nil
}

type applier struct {
	s       *state
	root    int
	upper   int
	entries map[string]sandbox.TreeEntry
	// sharedWrite keeps group and world write (ApplyOptions).
	sharedWrite bool
}

// mode is the mode apply gives the host's entry for c's after mode (the
// one listed, which a review saw): setuid and setgid stripped, and group
// and world write cleared unless the policy allows them or the host's
// entry of the same type had them already. The note says what was
// cleared.
func (a *applier) mode(c snapshot.Change) (uint32, string) {
	var notes []string
	m := c.After.Mode
	out := m & 0o1777
	if m&0o6000 != 0 {
		notes = append(notes, "setuid/setgid bits stripped")
	}
	drop := uint32(0o022)
	if c.Before != nil && c.Before.Type == c.After.Type {
		drop &^= c.Before.Mode
	}
	if !a.sharedWrite && out&drop != 0 {
		out &^= drop
		notes = append(notes, "group/world write cleared")
	}
	return out, strings.Join(notes, "; ")
}

func (a *applier) removes(c snapshot.Change) bool {
	if c.Before == nil {
		return false
	}
	if c.After == nil {
		return true
	}
	return c.Before.Type != c.After.Type && (c.Before.Type == sandbox.EntryDir || c.After.Type == sandbox.EntryDir)
}

func (a *applier) failedAncestor(failed map[string]bool, p string) string {
	for d := path.Dir(p); d != a.s.m.Target && d != "/" && d != "."; d = path.Dir(d) {
		if failed[d] {
			return d
		}
	}
	return ""
}

func (a *applier) rel(p string) string {
	r, _ := relOf(a.s.m.Target, p)
	return r
}

// parent opens rel's directory on the host for reading.
func (a *applier) parent(rel string) (int, error) {
	fd, err := openBeneath(a.root, path.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return -1, errors.New("a symlink on the host is in the way: apply never follows one")
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return -1, errors.New("its directory is not on the host: apply the directory too")
	case err != nil:
		return -1, err
	}
	return fd, nil
}

func (a *applier) remove(c snapshot.Change) error {
	rel := a.rel(c.Path)
	if rel == "." {
		return errors.New("the mounted directory itself is never removed")
	}
	pfd, err := a.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	flags := 0
	if c.Before.Type == sandbox.EntryDir {
		flags = unix.AT_REMOVEDIR
	}
	err = unix.Unlinkat(pfd, path.Base(rel), flags)
	switch {
	case errors.Is(err, unix.ENOENT):
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return errors.New("the host directory holds files the sandbox did not see: remove them on the host, or leave the directory")
	case err != nil:
		return err
	}
	_ = unix.Fsync(pfd)
	delete(a.entries, c.Path)
	return nil
}

// put makes the host's entry at c's path what the sandbox's is.
func (a *applier) put(ctx context.Context, c snapshot.Change) (Applied, error) {
	rel := a.rel(c.Path)
	ap := Applied{Path: c.Path, Kind: c.Kind}
	if c.Before != nil {
		ap.Before = c.Before.Digest
	}
	if rel == "." {
		// Only the mode of the mounted directory itself can change.
		mode, note := a.mode(c)
		fd, err := unix.Openat(a.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return ap, err
		}
		defer unix.Close(fd)
		if err := unix.Fchmod(fd, mode); err != nil {
			return ap, err
		}
		ap.Note = note
		e := *c.After
		e.Mode = mode
		a.entries[c.Path] = e
		return ap, nil
	}
	pfd, err := a.parent(rel)
	if err != nil {
		return ap, err
	}
	defer unix.Close(pfd)
	name := path.Base(rel)
	uid, gid := a.s.m.UID, a.s.m.GID
	var old unix.Stat_t
	if err := unix.Fstatat(pfd, name, &old, unix.AT_SYMLINK_NOFOLLOW); err == nil {
		uid, gid = int(old.Uid), int(old.Gid)
	}
	var e sandbox.TreeEntry
	mode, note := a.mode(c)
	switch c.After.Type {
	case sandbox.EntryFile:
		e, err = a.putFile(ctx, pfd, rel, name, uid, gid, c.Kind == snapshot.ChangeMode, c.After, mode)
	case sandbox.EntryDir:
		e, err = a.putDir(pfd, rel, name, uid, gid, mode)
	case sandbox.EntrySymlink:
		e, err = a.putSymlink(pfd, rel, name, uid, gid, c.After.Target)
	default:
		err = errors.New("apply never makes device files, FIFOs or sockets")
	}
	if err != nil {
		return ap, err
	}
	_ = unix.Fsync(pfd)
	e.Path = c.Path
	if c.After.Type != sandbox.EntrySymlink {
		ap.Note = note
	}
	ap.Digest = e.Digest
	a.entries[c.Path] = e
	return ap, nil
}

// upperStat opens rel in the upper layer.
func (a *applier) openUpper(rel string, flags int) (int, *unix.Stat_t, error) {
	fd, err := openBeneath(a.upper, rel, flags)
	if err != nil {
		return -1, nil, fmt.Errorf("read it in the sandbox's layer: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, &st, nil
}

func tempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return tempPrefix + hex.EncodeToString(b[:])
}

// putFile writes the sandbox's file at rel as listed (after: its content
// digest) with mode; a file that is no longer that is not written.
func (a *applier) putFile(ctx context.Context, pfd int, rel, name string, uid, gid int, modeOnly bool, after *sandbox.TreeEntry, mode uint32) (sandbox.TreeEntry, error) {
	sfd, st, err := a.openUpper(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return sandbox.TreeEntry{}, err
	}
	src := os.NewFile(uintptr(sfd), rel)
	defer src.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return sandbox.TreeEntry{}, errors.New("it is no longer a file in the sandbox: list the changes again")
	}
	if st.Nlink > 1 {
		return sandbox.TreeEntry{}, errors.New("it is a hard link in the sandbox now: apply never links host files")
	}
	if modeOnly {
		// The content is the host's: change its mode in place.
		fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return sandbox.TreeEntry{}, err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		d, err := digestFile(f)
		if err != nil {
			return sandbox.TreeEntry{}, err
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			return sandbox.TreeEntry{}, err
		}
		return sandbox.TreeEntry{Type: sandbox.EntryFile, Mode: mode, Size: st.Size, Digest: d}, nil
	}
	tmp := tempName()
	tfd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("make a temporary file on the host: %w", err)
	}
	dst := os.NewFile(uintptr(tfd), tmp)
	ok := false
	defer func() {
		dst.Close()
		if !ok {
			_ = unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(dst, h), &ctxReader{ctx: ctx, r: src})
	if err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("copy it to the host: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != after.Digest || n != after.Size {
		return sandbox.TreeEntry{}, errors.New("the sandbox changed it while it was being applied; nothing of it was written: list the changes again and review it")
	}
	if err := unix.Fchown(tfd, uid, gid); err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("keep the owner: %w", err)
	}
	if err := unix.Fchmod(tfd, mode); err != nil {
		return sandbox.TreeEntry{}, err
	}
	if err := dst.Sync(); err != nil {
		return sandbox.TreeEntry{}, err
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("put it in place: %w", err)
	}
	ok = true
	return sandbox.TreeEntry{Type: sandbox.EntryFile, Mode: mode, Size: n, Digest: got}, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (a *applier) putDir(pfd int, rel, name string, uid, gid int, mode uint32) (sandbox.TreeEntry, error) {
	sfd, st, err := a.openUpper(rel, unix.O_PATH)
	if err != nil {
		return sandbox.TreeEntry{}, err
	}
	unix.Close(sfd)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return sandbox.TreeEntry{}, errors.New("it is no longer a directory in the sandbox: list the changes again")
	}
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return sandbox.TreeEntry{}, err
	} else if err == nil {
		if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return sandbox.TreeEntry{}, fmt.Errorf("keep the owner: %w", err)
		}
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("a file that is not a directory is in the way on the host: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return sandbox.TreeEntry{}, err
	}
	return sandbox.TreeEntry{Type: sandbox.EntryDir, Mode: mode}, nil
}

// putSymlink makes the symlink at rel, whose target was checked as
// checked (refusals): one the sandbox changed since is not made.
func (a *applier) putSymlink(pfd int, rel, name string, uid, gid int, checked string) (sandbox.TreeEntry, error) {
	sfd, err := openBeneath(a.upper, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("read it in the sandbox's layer: %w", err)
	}
	target, err := readlinkAt(sfd, path.Base(rel))
	unix.Close(sfd)
	if err != nil {
		return sandbox.TreeEntry{}, fmt.Errorf("it is no longer a symlink in the sandbox: list the changes again (%w)", err)
	}
	if target != checked {
		return sandbox.TreeEntry{}, errors.New("the sandbox changed its target while it was being applied; nothing of it was written: list the changes again")
	}
	tmp := tempName()
	if err := unix.Symlinkat(target, pfd, tmp); err != nil {
		return sandbox.TreeEntry{}, err
	}
	if err := unix.Fchownat(pfd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
		return sandbox.TreeEntry{}, fmt.Errorf("keep the owner: %w", err)
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
		return sandbox.TreeEntry{}, fmt.Errorf("put it in place: %w", err)
	}
	return sandbox.TreeEntry{Type: sandbox.EntrySymlink, Mode: 0o777, Target: target}, nil
}
