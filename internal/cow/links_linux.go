//go:build linux

package cow

import (
	"errors"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/symlink"
)

// Where the symlinks of the host directory lead once an apply is done: a
// target is walked in the tree the apply produces (the host directory
// with the chosen changes), links substituted (symlink.Resolve), never
// lexically: y -> . and x -> y/y/../../etc/shadow each read as if they
// stay inside, and together lead to /etc/shadow.

// trees are the tree before an apply (the host directory) and after it,
// and which paths (relative to the mount's root) the apply changes.
type trees struct {
	before, after symlink.Lookup
	// links are every symlink of the tree after (relative paths).
	links []string
	// changed maps the relative paths the apply changes to their paths
	// in the sandbox.
	changed map[string]string
}

// linkRefusals says, by change path, why an apply would leave a symlink
// leading outside the mounted directory: a symlink it makes whose target
// leaves it, or one of the host's (relative, inside before) that the
// changes would make leave it (the changes it passes through are refused).
// Absolute targets of new links are refused by refusal; the host's own
// links that already lead out are the host's business.
func linkRefusals(t trees) map[string]string {
	out := map[string]string{}
	for _, rel := range t.links {
		target, _, err := t.after(rel)
		if err != nil || strings.HasPrefix(target, "/") {
			continue
		}
		var hits []string
		look := func(p string) (string, bool, error) {
			if _, ok := t.changed[p]; ok {
				hits = append(hits, p)
			}
			return t.after(p)
		}
		_, _, err = symlink.Resolve(rel, target, look)
		if err == nil {
			continue
		}
		var e *symlink.Error
		if p, ok := t.changed[rel]; ok {
			if errors.As(err, &e) {
				out[p] = "a symlink to " + quote(target) + ", which leads outside the mounted directory (" + e.Reason + via(e.Via) + ")"
			} else {
				out[p] = "a symlink whose target cannot be checked: " + err.Error()
			}
			continue
		}
		if !errors.As(err, &e) {
			continue
		}
		if _, _, err := symlink.Resolve(rel, target, t.before); err != nil {
			continue // it led out before the apply too
		}
		for _, h := range hits {
			if _, done := out[t.changed[h]]; !done {
				out[t.changed[h]] = "it would make the host's symlink " + quote(rel) + " -> " + quote(target) + " lead outside the mounted directory"
			}
		}
	}
	return out
}

func via(links []string) string {
	if len(links) == 0 {
		return ""
	}
	q := make([]string, len(links))
	for i, l := range links {
		q[i] = quote(l)
	}
	return ", through " + strings.Join(q, ", ")
}

// entryLinks is a Lookup of the symlinks among es, with links their
// relative paths.
func (s *state) entryLinks(es []sandbox.TreeEntry) (symlink.Lookup, []string) {
	m := map[string]string{}
	var links []string
	for _, e := range es {
		if e.Type != sandbox.EntrySymlink {
			continue
		}
		if rel, ok := relOf(s.m.Target, e.Path); ok && rel != "." {
			m[rel] = e.Target
			links = append(links, rel)
		}
	}
	return symlink.Map(m), links
}

// listingTrees are the trees of an apply of every change: the manifest
// before, what the sandbox sees after.
func (s *state) listingTrees() trees {
	before, _ := s.entryLinks(s.m.Entries)
	after, links := s.entryLinks(s.after)
	changed := map[string]string{}
	for _, c := range s.diff.Changes {
		if rel, ok := relOf(s.m.Target, c.Path); ok {
			changed[rel] = c.Path
		}
	}
	return trees{before: before, after: after, links: links, changed: changed}
}

// applyTrees are the trees of an apply of chosen: the host directory as
// it is now (root) before, and with chosen after.
func (s *state) applyTrees(root int, chosen []snapshot.Change) trees {
	by := map[string]*sandbox.TreeEntry{}
	changed := map[string]string{}
	for _, c := range chosen {
		if rel, ok := relOf(s.m.Target, c.Path); ok {
			by[rel], changed[rel] = c.After, c.Path
		}
	}
	before := func(rel string) (string, bool, error) { return hostLink(root, rel) }
	// gone says an apply removes rel: it or a directory above it is
	// chosen and no longer a directory after.
	gone := func(rel string) bool {
		for p := path.Dir(rel); p != "."; p = path.Dir(p) {
			if a, ok := by[p]; ok && (a == nil || a.Type != sandbox.EntryDir) {
				return true
			}
		}
		return false
	}
	after := func(rel string) (string, bool, error) {
		if a, ok := by[rel]; ok {
			if a != nil && a.Type == sandbox.EntrySymlink {
				return a.Target, true, nil
			}
			return "", false, nil
		}
		if gone(rel) {
			return "", false, nil
		}
		return hostLink(root, rel)
	}
	var links []string
	for _, e := range s.m.Entries {
		rel, ok := relOf(s.m.Target, e.Path)
		if !ok || rel == "." || e.Type != sandbox.EntrySymlink {
			continue
		}
		if _, ok := by[rel]; !ok && !gone(rel) {
			links = append(links, rel)
		}
	}
	for rel, a := range by {
		if a != nil && a.Type == sandbox.EntrySymlink && !gone(rel) {
			links = append(links, rel)
		}
	}
	slices.Sort(links)
	return trees{before: before, after: after, links: links, changed: changed}
}

// hostLink is the target of the symlink at rel in the host directory
// now; false when rel is something else or absent (or below a symlink).
func hostLink(root int, rel string) (string, bool, error) {
	dfd, err := openBeneath(root, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, path.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return "", false, nil
	} else if err != nil {
		return "", false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", false, nil
	}
	t, err := readlinkAt(dfd, path.Base(rel))
	return t, err == nil, err
}
