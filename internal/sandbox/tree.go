package sandbox

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// This file holds what a driver needs to snapshot and restore a sandbox's
// writable file trees (/workspace, /tmp): the entries of a tree and the
// Snapshotter interface. Package snapshot stores them and diffs them.

// Tree entry types.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
)

// TreeEntry is one file, directory or symlink of a snapshotted tree.
type TreeEntry struct {
	// Path is absolute inside the sandbox ("/workspace/src/main.py"),
	// clean, below one of the tree's roots (the root itself is an entry).
	Path string `json:"path"`
	// Type is EntryFile, EntryDir or EntrySymlink.
	Type string `json:"type"`
	// Mode holds the permission bits, setgid and sticky (07777 without setuid).
	Mode uint32 `json:"mode"`
	// Size is a file's length in bytes.
	Size int64 `json:"size,omitempty"`
	// Digest is a file's content: "sha256:" and 64 lower-case hex digits.
	Digest string `json:"digest,omitempty"`
	// Target is where a symlink points, as stored.
	Target string `json:"target,omitempty"`
	// MTime is the modification time, in nanoseconds since 1970 (files
	// and symlinks get it back on restore; directories get what the
	// restore leaves).
	MTime int64 `json:"mtime,omitempty"`
}

// Limits of a tree that a snapshot or a restore accepts.
const (
	// MaxTreeDepth is how deep a tree may nest directories.
	MaxTreeDepth = 256
	// MaxTreePath is the longest path of an entry.
	MaxTreePath = 4095
	// MaxSymlinkTarget is the longest symlink target.
	MaxSymlinkTarget = 4095
)

// ValidDigest reports whether d is "sha256:" and 64 lower-case hex digits.
func ValidDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SnapshotRoots are the trees a snapshot may hold.
var SnapshotRoots = []string{Workspace, "/tmp"}

// ValidRoot reports whether r may be snapshotted.
func ValidRoot(r string) bool {
	for _, s := range SnapshotRoots {
		if r == s {
			return true
		}
	}
	return false
}

// Validate checks that e is a well-formed entry below one of roots: a
// clean absolute path without "." or ".." elements, a known type, what
// its type needs. Entries come from agents and stores, which are not
// trusted.
func (e TreeEntry) Validate(roots []string) error {
	if err := validTreePath(e.Path, roots); err != nil {
		return err
	}
	if e.Mode&^0o3777 != 0 {
		return invalid("entry %s: mode %o has bits beyond the permissions, setgid and sticky", e.Path, e.Mode)
	}
	switch e.Type {
	case EntryFile:
		if e.Size < 0 || !ValidDigest(e.Digest) || e.Target != "" {
			return invalid("entry %s: a file needs a size and a sha256 digest", e.Path)
		}
	case EntryDir:
		if e.Size != 0 || e.Digest != "" || e.Target != "" {
			return invalid("entry %s: a directory has no size, digest or target", e.Path)
		}
	case EntrySymlink:
		if e.Target == "" || len(e.Target) > MaxSymlinkTarget || strings.IndexByte(e.Target, 0) >= 0 || e.Digest != "" {
			return invalid("entry %s: a symlink needs a target of 1 to %d bytes", e.Path, MaxSymlinkTarget)
		}
	default:
		return invalid("entry %s: type %q is not file, dir or symlink", e.Path, e.Type)
	}
	return nil
}

func validTreePath(p string, roots []string) error {
	if len(p) > MaxTreePath || strings.IndexByte(p, 0) >= 0 {
		return invalid("path of %d bytes: at most %d, without NUL", len(p), MaxTreePath)
	}
	for _, r := range roots {
		if p == r {
			return nil
		}
		rest, ok := strings.CutPrefix(p, r+"/")
		if !ok {
			continue
		}
		depth := 0
		for _, el := range strings.Split(rest, "/") {
			if el == "" || el == "." || el == ".." {
				return invalid("path %q is not clean", p)
			}
			depth++
		}
		if depth > MaxTreeDepth {
			return invalid("path %q is more than %d directories deep", p, MaxTreeDepth)
		}
		return nil
	}
	return invalid("path %q is outside %v", p, roots)
}

// BlobPut stores what r holds and returns its digest and size, computed
// by the host from the bytes themselves.
type BlobPut func(ctx context.Context, r io.Reader) (digest string, size int64, err error)

// BlobGet opens stored content by digest.
type BlobGet func(ctx context.Context, digest string) (io.ReadCloser, error)

// CaptureRequest says what to capture.
type CaptureRequest struct {
	Roots []string
	// Have reports whether the host already stores digest; content it has
	// is not sent. Nil means the host has nothing.
	Have func(digest string) bool
	// MaxFiles and MaxBytes bound the entries and the total file size;
	// zero means no bound.
	MaxFiles int
	MaxBytes int64
}

// Capture is a captured state.
type Capture struct {
	Entries []TreeEntry
	// Unsettled names files that kept changing while they were read: each
	// holds content it had at one moment only if it stopped changing.
	Unsettled []string
	// Sent counts the files and bytes whose content went to put.
	SentFiles int
	SentBytes int64
}

// ApplyRequest says what to make the trees.
type ApplyRequest struct {
	Roots   []string
	Entries []TreeEntry
}

// ApplyStats say what an Apply changed.
type ApplyStats struct {
	Added    int   `json:"added"`
	Changed  int   `json:"changed"`
	Removed  int   `json:"removed"`
	Received int64 `json:"received_bytes"`
}

// RollbackMode says when an exec's changes to the workspace are undone.
type RollbackMode string

const (
	// RollbackNever keeps what the exec changed (the default).
	RollbackNever RollbackMode = ""
	// RollbackOnFailure restores the workspace to its state before the
	// exec when it fails: a non-zero exit, a signal, any limit hit, or a
	// denial.
	RollbackOnFailure RollbackMode = "on_failure"
)

// ParseRollback checks a rollback mode's name ("", "never", "on_failure").
func ParseRollback(s string) (RollbackMode, error) {
	switch s {
	case "", "never":
		return RollbackNever, nil
	case string(RollbackOnFailure):
		return RollbackOnFailure, nil
	}
	return "", fmt.Errorf("%w: rollback %q: use \"on_failure\" or leave it out", ErrInvalid, s)
}

// Rollback says what a transactional exec's rollback did.
type Rollback struct {
	// RolledBack says the workspace was restored to its state before the
	// exec.
	RolledBack bool `json:"rolled_back"`
	// Why is the failure that caused it ("exit code 1", "limit memory").
	Why string `json:"why,omitempty"`
	// Snapshot is the id of the snapshot taken before the exec.
	Snapshot string `json:"snapshot,omitempty"`
	// Added, Changed and Removed count what the restore undid: files the
	// exec added (removed again), changed (put back) and removed (made
	// again).
	Added   int `json:"added"`
	Changed int `json:"changed"`
	Removed int `json:"removed"`
	// Error says why a rollback that was due did not happen.
	Error string `json:"error,omitempty"`
}
