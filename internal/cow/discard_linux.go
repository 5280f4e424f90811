//go:build linux

package cow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// Discard drops the pending changes at paths (as Apply's) from the
// sandbox's layer: the sandbox sees the host's files there again. A
// process in the sandbox that holds a discarded file open keeps it, and
// the kernel may show the sandbox a discarded name it looked up recently
// until it drops it from its cache: discard is for work that is over.
func Discard(ctx context.Context, dir string, paths []string) (*DiscardResult, error) {
	defer lock(dir)()
	s, err := load(ctx, dir)
	if errors.Is(err, sandbox.ErrLimit) && len(paths) == 0 {
		// Too much to list: discarding everything needs no listing.
		return discardAll(dir)
	}
	if err != nil {
		return nil, err
	}
	var sel []string
	if len(paths) > 0 {
		if sel, err = normalize(s.m.Target, paths); err != nil {
			return nil, err
		}
	}
	var chosen []snapshot.Change
	for _, c := range s.diff.Changes {
		if selected(sel, c.Path) {
			chosen = append(chosen, c)
		}
	}
	if sel != nil && len(chosen) == 0 {
		return nil, fmt.Errorf("%w: no pending change at %s; list them with `airlock sandbox changes`", sandbox.ErrNotFound, strings.Join(sel, ", "))
	}
	ufd, err := unix.Open(upperPath(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ufd)
	res := &DiscardResult{Target: s.m.Target, Discarded: []string{}}
	var gone []string
	under := func(p string) bool {
		for _, g := range gone {
			if strings.HasPrefix(p, g+"/") {
				return true
			}
		}
		return false
	}
	for _, c := range chosen {
		if under(c.Path) {
			res.Discarded = append(res.Discarded, c.Path)
			continue
		}
		rel, _ := relOf(s.m.Target, c.Path)
		if rel == "." {
			// The mounted directory's own mode: back to the host's.
			mode := uint32(0o755)
			for _, e := range s.m.Entries {
				if e.Path == s.m.Target {
					mode = e.Mode
				}
			}
			if err := unix.Fchmod(ufd, mode); err != nil {
				res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: err.Error()})
				continue
			}
			res.Discarded = append(res.Discarded, c.Path)
			continue
		}
		pfd, err := openBeneath(ufd, path.Dir(rel), unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: "it is part of a change to its directory: discard " + quote(path.Dir(c.Path)) + " instead"})
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, path.Base(rel), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			unix.Close(pfd)
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: "it is part of a change to its directory: discard " + quote(path.Dir(c.Path)) + " instead"})
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAllAt(pfd, path.Base(rel), 0)
		} else {
			err = unix.Unlinkat(pfd, path.Base(rel), 0)
		}
		unix.Close(pfd)
		if err != nil {
			res.Refused = append(res.Refused, Refusal{Path: c.Path, Reason: err.Error()})
			continue
		}
		gone = append(gone, c.Path)
		res.Discarded = append(res.Discarded, c.Path)
	}
	for _, c := range chosen {
		if slices.Contains(res.Discarded, c.Path) {
			d := Applied{Path: c.Path, Kind: c.Kind}
			if c.Before != nil {
				d.Before = c.Before.Digest
			}
			if c.After != nil {
				d.Digest = c.After.Digest
			}
			res.Dropped = append(res.Dropped, d)
		}
	}
	return res, nil
}

// discardAll empties the upper layer of dir: every change dropped.
func discardAll(dir string) (*DiscardResult, error) {
	m, err := loadMeta(dir)
	if err != nil {
		return nil, err
	}
	ufd, err := unix.Open(upperPath(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(ufd), "upper")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	res := &DiscardResult{Target: m.Target, Discarded: []string{}}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(ufd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAllAt(ufd, n, 0)
		} else {
			err = unix.Unlinkat(ufd, n, 0)
		}
		p := path.Join(m.Target, n)
		if err != nil {
			res.Refused = append(res.Refused, Refusal{Path: p, Reason: err.Error()})
			continue
		}
		res.Discarded = append(res.Discarded, p)
		res.Dropped = append(res.Dropped, Applied{Path: p, Kind: "all"})
	}
	for _, e := range m.Entries {
		if e.Path == m.Target {
			_ = unix.Fchmod(ufd, e.Mode)
		}
	}
	return res, nil
}

// removeAllAt removes the directory name below dfd with all it holds,
// never following a symlink.
func removeAllAt(dfd int, name string, depth int) error {
	if depth > maxDepth+1 {
		return fmt.Errorf("%w: too deep", sandbox.ErrLimit)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = removeAllAt(fd, n, depth+1)
		} else {
			err = unix.Unlinkat(fd, n, 0)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			f.Close()
			return err
		}
	}
	f.Close()
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}
