// Package cow keeps copy-on-write mounts (sandbox.Mount.Cow): a host
// directory the sandbox sees and writes, whose writes land in an upper
// layer of the sandbox's own until a person applies or discards them.
//
// The host makes the mount (an overlay of the host directory under an
// upper layer on a tmpfs sized by the sandbox's disk limit) and records,
// when the sandbox starts, a manifest of the host directory: every entry's
// type, mode, symlink target and content digest. The pending change is
// the manifest compared with the manifest as the upper layer changes it.
// Apply writes the chosen paths into the host directory, each atomically,
// after checking that the host still holds what the manifest says under
// each of them; a journal in the layer's directory lets the next start say
// what an apply interrupted by a crash did.
package cow

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// Limits of what a cow mount holds.
const (
	// MaxEntries bounds the entries of the host directory a cow mount
	// records at start.
	MaxEntries = 200_000
	// maxDepth bounds how deep the walks descend.
	maxDepth = sandbox.MaxTreeDepth
	// tempPrefix starts the names of apply's temporary files.
	tempPrefix = ".airlock-cow-"
)

// Entry types beyond sandbox.TreeEntry's that a layer may hold; apply
// never makes one.
const (
	EntryFIFO   = "fifo"
	EntrySocket = "socket"
	EntryDevice = "device"
)

// meta is what a layer's directory keeps beside the upper layer.
type meta struct {
	Sandbox string `json:"sandbox"`
	Source  string `json:"source"`
	Target  string `json:"target"`
	// Dev and Ino identify the host directory: an apply refuses a source
	// that was replaced.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
	// UID and GID own the host directory: new host files get them.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Entries are the host directory's entries when the sandbox started
	// (updated by each apply), paths absolute in the sandbox, sorted.
	Entries []sandbox.TreeEntry `json:"entries"`
}

// LayerDir is where a driver keeps the layer of mount i of sandbox id
// (as sandbox.CowLayers says).
func LayerDir(stateDir, id string, i int) string {
	return filepath.Join(stateDir, "cow", id, strconv.Itoa(i))
}

func metaPath(dir string) string    { return filepath.Join(dir, "meta.json") }
func journalPath(dir string) string { return filepath.Join(dir, "journal.json") }

// layer paths inside the layer's tmpfs mount (dir/layer).
func upperPath(dir string) string { return filepath.Join(dir, "layer", "upper") }
func workPath(dir string) string  { return filepath.Join(dir, "layer", "work") }

func loadMeta(dir string) (*meta, error) {
	b, err := os.ReadFile(metaPath(dir))
	if err != nil {
		return nil, fmt.Errorf("read the cow mount's record: %w", err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read the cow mount's record: %w", err)
	}
	return &m, nil
}

// save writes m atomically (a temporary file, fsync, rename).
func (m *meta) save(dir string) error {
	return writeAtomic(metaPath(dir), m)
}

func writeAtomic(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Change is one pending change of a cow mount: the diff format of the
// rollback issue (snapshot.Change, paths absolute in the sandbox), and
// why an apply would refuse it.
type Change struct {
	snapshot.Change
	// Refused says why apply refuses this path; empty when it applies.
	Refused string `json:"refused,omitempty"`
	// Conflict says the host changed under this path since the sandbox
	// started: an apply naming it fails.
	Conflict string `json:"conflict,omitempty"`
	// Entry is EntryDigest(After): what a reviewer saw of the change (its
	// type, mode, size, content and symlink target), which an apply's
	// expect sends back. Empty for a deletion.
	Entry string `json:"entry,omitempty"`
	// Warning says what a reviewer should look at that apply does not
	// refuse (a world-writable mode).
	Warning string `json:"warning,omitempty"`
}

// ApplyOptions are an apply's choices.
type ApplyOptions struct {
	// Paths chooses the changes (Apply's paths; none: all).
	Paths []string
	// Expect maps paths to the Entry each change showed a reviewer
	// (ApplyReviewed); nil checks nothing.
	Expect map[string]string
	// SharedWrite keeps the group and world write bits the sandbox gave
	// what apply makes (the policy's [cow] shared_write); false clears
	// them.
	SharedWrite bool
}

// entryPrefix starts an entry digest.
const entryPrefix = "entry:sha256:"

// EntryDigest is the digest of what a reviewer sees of a change's after
// entry: its type, mode, size, content digest and symlink target (not its
// path or times); "" for nil (a deletion).
func EntryDigest(e *sandbox.TreeEntry) string {
	if e == nil {
		return ""
	}
	mode := e.Mode
	if e.Type == sandbox.EntrySymlink {
		mode = 0 // a symlink's mode is meaningless (and never applied)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%o\x00%d\x00%s\x00%s", e.Type, mode, e.Size, e.Digest, e.Target)
	return entryPrefix + hex.EncodeToString(h.Sum(nil))
}

func validEntryDigest(d string) bool {
	rest, ok := strings.CutPrefix(d, entryPrefix)
	if !ok || len(rest) != 64 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil && strings.ToLower(rest) == rest
}

// describe says what e is, for a conflict: "deleted", "a symlink to X",
// "a file (mode 0644, 12 bytes, sha256:…)".
func describe(e *sandbox.TreeEntry) string {
	switch {
	case e == nil:
		return "deleted"
	case e.Type == sandbox.EntrySymlink:
		return "a symlink to " + strconv.Quote(e.Target)
	case e.Type == sandbox.EntryFile:
		return fmt.Sprintf("a file, mode %04o, %d bytes, %s", e.Mode, e.Size, e.Digest)
	case e.Type == sandbox.EntryDir:
		return fmt.Sprintf("a directory, mode %04o", e.Mode)
	}
	return "a " + e.Type
}

// Warning is Change.Warning for the after entry e, of a mount whose
// applies keep group and world write (sharedWrite) or clear them.
func Warning(e *sandbox.TreeEntry, sharedWrite bool) string {
	if e == nil || e.Type == sandbox.EntrySymlink || e.Mode&0o002 == 0 {
		return ""
	}
	if sharedWrite {
		return fmt.Sprintf("world-writable (mode %04o): the policy's [cow] shared_write keeps it so on the host", e.Mode)
	}
	return fmt.Sprintf("world-writable (mode %04o): apply clears group and world write unless the policy's [cow] shared_write names the host directory", e.Mode)
}

// Pending is a cow mount's pending change.
type Pending struct {
	Target  string   `json:"target"`
	Source  string   `json:"source"`
	Changes []Change `json:"changes"`
	// Truncated says text diffs were cut or left out (too large).
	Truncated bool `json:"truncated,omitempty"`
}

// Applied is one path an apply wrote.
type Applied struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Digest is the content written (files only).
	Digest string `json:"digest,omitempty"`
	// Before is the host's content when the sandbox started (files only).
	Before string `json:"before,omitempty"`
	// Note says what apply changed on the way (setuid bits stripped).
	Note string `json:"note,omitempty"`
}

// Refusal is a path an apply or discard left alone, and why.
type Refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ApplyResult says what an apply did.
type ApplyResult struct {
	Target  string    `json:"target"`
	Applied []Applied `json:"applied"`
	Refused []Refusal `json:"refused"`
}

// DiscardResult says what a discard did.
type DiscardResult struct {
	Target    string    `json:"target"`
	Discarded []string  `json:"discarded"`
	Refused   []Refusal `json:"refused,omitempty"`
	// Dropped are the discarded changes with the digests of what was
	// dropped (for the audit log).
	Dropped []Applied `json:"-"`
}

// ConflictError says the host changed under paths an apply was asked to
// write since the sandbox started; nothing was applied.
type ConflictError struct {
	Target    string
	Conflicts []Refusal
}

func (e *ConflictError) Error() string {
	paths := make([]string, 0, 3)
	for i, c := range e.Conflicts {
		if i == 3 {
			paths = append(paths, "…")
			break
		}
		paths = append(paths, c.Path)
	}
	return fmt.Sprintf("the host directory changed under %d path(s) since the sandbox started (%s): nothing was applied; discard those paths, or apply the others by naming them", len(e.Conflicts), strings.Join(paths, ", "))
}

// CheckName says why rel (a path relative to the mount's root) may not be
// written on the host: empty, absolute, "." or ".." elements, control
// characters, over-long.
func CheckName(rel string) string {
	if rel == "" || len(rel) > sandbox.MaxTreePath {
		return "the path is empty or longer than 4095 bytes"
	}
	if strings.HasPrefix(rel, "/") {
		return "the path is absolute"
	}
	for _, el := range strings.Split(rel, "/") {
		switch el {
		case "", ".", "..":
			return "the path has an empty, \".\" or \"..\" element"
		}
		if len(el) > 255 {
			return "a path element is longer than 255 bytes"
		}
	}
	for _, r := range rel {
		if r < 0x20 || r == 0x7f {
			return "the name holds a control character; rename it in the sandbox to apply it"
		}
	}
	return ""
}

// relOf is p (absolute in the sandbox) relative to target; ok false when
// p is not below target. The target itself is ".".
func relOf(target, p string) (string, bool) {
	if p == target {
		return ".", true
	}
	if target == "/" {
		return strings.TrimPrefix(p, "/"), p != "/"
	}
	rest, ok := strings.CutPrefix(p, target+"/")
	return rest, ok
}

// normalize turns each requested path (relative to the mount's root, or
// absolute in the sandbox) into a path absolute in the sandbox.
func normalize(target string, paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		var abs string
		if strings.HasPrefix(p, "/") {
			abs = path.Clean(p)
			if _, ok := relOf(target, abs); !ok {
				return nil, fmt.Errorf("%w: path %q is not below the cow mount %s", sandbox.ErrInvalid, p, target)
			}
		} else {
			if strings.ContainsRune(p, 0) {
				return nil, fmt.Errorf("%w: path %q holds NUL", sandbox.ErrInvalid, p)
			}
			abs = path.Join(target, p)
			if _, ok := relOf(target, abs); !ok {
				return nil, fmt.Errorf("%w: path %q is not below the cow mount %s", sandbox.ErrInvalid, p, target)
			}
		}
		out = append(out, abs)
	}
	return out, nil
}

// selected reports whether p is chosen by sel (nil chooses all): p is one
// of sel or below one of them.
func selected(sel []string, p string) bool {
	if sel == nil {
		return true
	}
	for _, s := range sel {
		if p == s || strings.HasPrefix(p, s+"/") || s == "/" {
			return true
		}
	}
	return false
}

// sortEntries sorts tree entries by path as snapshot.Compare needs.
func sortEntries(es []sandbox.TreeEntry) {
	slices.SortFunc(es, func(a, b sandbox.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
}
