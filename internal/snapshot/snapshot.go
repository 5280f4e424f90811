// Package snapshot keeps the snapshots of sandboxes' writable trees: each
// snapshot is a manifest (the entries of /workspace, and /tmp when asked:
// paths, types, modes, symlink targets, file digests) and the content of
// its files, stored once per digest (content-addressed), so that files
// that do not change between snapshots, or across the sandboxes of one
// key, cost nothing more.
//
// Content lives in namespaces, one per API key: a sandbox can only ever
// name content its own key stored (an agent that claims a digest it never
// sent gets nothing of another key's). The Store interface is what the
// supervisor uses; Local keeps it on the daemon's disk, and another
// implementation (an object store) can sit behind the same interface.
//
// Diff compares two manifests (diff.go) and renders the changes as JSON
// or text, with unified diffs of text files.
package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Kinds of snapshots.
const (
	// KindManual is a snapshot a caller asked for.
	KindManual = "manual"
	// KindCheckpoint is taken before each exec of a sandbox that keeps
	// checkpoints; Step numbers them.
	KindCheckpoint = "checkpoint"
	// KindPreExec is taken before a transactional exec and removed after it.
	KindPreExec = "pre_exec"
)

// Info describes a snapshot without its entries.
type Info struct {
	ID string `json:"id"`
	// Name is the caller's name for it, unique among the sandbox's
	// snapshots; empty when none was given.
	Name  string `json:"name,omitempty"`
	Label string `json:"label,omitempty"`
	// Owner is the key whose content namespace holds its files.
	Owner    string    `json:"owner"`
	Sandbox  string    `json:"sandbox"`
	Template string    `json:"template"`
	Driver   string    `json:"driver,omitempty"`
	Kind     string    `json:"kind"`
	Step     int64     `json:"step,omitempty"`
	Created  time.Time `json:"created"`
	Roots    []string  `json:"roots"`
	// Files counts the files, Count every entry (directories, symlinks
	// too); Bytes is the sum of the files' sizes.
	Files int   `json:"files"`
	Count int   `json:"entries"`
	Bytes int64 `json:"bytes"`
	// NewBytes is what this snapshot added to the store (content no
	// earlier snapshot of the key held).
	NewBytes int64 `json:"new_bytes"`
	// Busy says commands were running while it was taken: each file is as
	// it was at one moment, not all files at the same moment.
	Busy bool `json:"busy,omitempty"`
	// Unsettled names files that kept changing while they were read.
	Unsettled []string `json:"unsettled,omitempty"`
	// Note says, in words, what the snapshot holds and what it does not.
	Note string `json:"note,omitempty"`
}

// Snapshot is a snapshot with its entries, sorted by path.
type Snapshot struct {
	Info
	Entries []sandbox.TreeEntry `json:"tree"`
}

// Usage is what a namespace holds.
type Usage struct {
	Snapshots int   `json:"snapshots"`
	Bytes     int64 `json:"bytes"`
}

// Store keeps snapshots and their content. Implementations are safe for
// concurrent use.
type Store interface {
	// HasBlob reports whether ns holds content digest.
	HasBlob(ctx context.Context, ns, digest string) (bool, error)
	// PutBlob stores what r holds in ns and returns its digest and size.
	// The digest is computed here, never taken from the caller.
	PutBlob(ctx context.Context, ns string, r io.Reader) (digest string, size int64, err error)
	// OpenBlob opens content digest of ns.
	OpenBlob(ctx context.Context, ns, digest string) (io.ReadCloser, error)
	// Put records a snapshot. Every file's content must be in its owner's
	// namespace.
	Put(ctx context.Context, s *Snapshot) error
	// Get returns the snapshot id; an error wrapping sandbox.ErrNotFound
	// when there is none.
	Get(ctx context.Context, id string) (*Snapshot, error)
	// List describes the snapshots of owner ("" for every owner), oldest
	// first.
	List(ctx context.Context, owner string) ([]Info, error)
	// Delete removes the snapshot id, and the content no other snapshot
	// of its owner holds.
	Delete(ctx context.Context, id string) error
	// Usage says what owner's snapshots hold together.
	Usage(ctx context.Context, owner string) (Usage, error)
}

// The patterns compile on first use: the one-shot run links this package
// (through the drivers' cow mounts) and never checks a snapshot name.
var (
	idPattern   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sn-[0-9a-f]{12}$`) })
	namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })
)

// NewID returns a new snapshot id ("sn-" and 12 hex digits).
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sn-" + hex.EncodeToString(b[:])
}

// ValidID reports whether id is a snapshot id.
func ValidID(id string) bool { return idPattern().MatchString(id) }

// CheckName checks a snapshot's name: 1 to 64 letters, digits, '.', '_'
// and '-', starting with a letter or digit, and not an id.
func CheckName(name string) error {
	if !namePattern().MatchString(name) || name == "." || name == ".." || ValidID(name) {
		return fmt.Errorf("%w: snapshot name %q: use 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit (not a path, not an id like sn-0123456789ab)", sandbox.ErrInvalid, clip(name, 80))
	}
	return nil
}

// MaxLabel is the longest label.
const MaxLabel = 256

// CheckLabel checks a snapshot's label: free text of at most MaxLabel
// bytes, valid UTF-8, no control characters.
func CheckLabel(label string) error {
	if len(label) > MaxLabel || !utf8.ValidString(label) {
		return fmt.Errorf("%w: label: at most %d bytes of UTF-8 text", sandbox.ErrInvalid, MaxLabel)
	}
	for _, r := range label {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: label: no control characters", sandbox.ErrInvalid)
		}
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Summarize fills s's counts from its entries.
func (s *Snapshot) Summarize() {
	s.Files, s.Count, s.Bytes = 0, len(s.Entries), 0
	for _, e := range s.Entries {
		if e.Type == sandbox.EntryFile {
			s.Files++
			s.Bytes += e.Size
		}
	}
}

// Check validates a snapshot read from a store or made from what an agent
// said: its id, roots and entries (sorted, unique, each below a root).
func (s *Snapshot) Check() error {
	if !ValidID(s.ID) {
		return fmt.Errorf("snapshot id %q: %w", clip(s.ID, 40), sandbox.ErrInvalid)
	}
	if len(s.Roots) == 0 || s.Roots[0] != sandbox.Workspace {
		return fmt.Errorf("snapshot %s: roots %v: %w", s.ID, s.Roots, sandbox.ErrInvalid)
	}
	for _, r := range s.Roots {
		if !sandbox.ValidRoot(r) {
			return fmt.Errorf("snapshot %s: root %q: %w", s.ID, r, sandbox.ErrInvalid)
		}
	}
	for i, e := range s.Entries {
		if err := e.Validate(s.Roots); err != nil {
			return fmt.Errorf("snapshot %s: %w", s.ID, err)
		}
		if i > 0 && s.Entries[i-1].Path >= e.Path {
			return fmt.Errorf("snapshot %s: entries not sorted at %s: %w", s.ID, e.Path, sandbox.ErrInvalid)
		}
	}
	return nil
}
