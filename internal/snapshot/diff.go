package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// Kinds of changes.
const (
	ChangeAdded    = "added"
	ChangeDeleted  = "deleted"
	ChangeModified = "modified" // a file's content
	ChangeMode     = "mode"     // permissions only
	ChangeSymlink  = "symlink"  // a symlink's target
	ChangeType     = "type"     // a file became a directory, and so on
)

// Change is one path that differs between two states.
type Change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Before and After are the entry in each state; nil where it is absent.
	Before *sandbox.TreeEntry `json:"before,omitempty"`
	After  *sandbox.TreeEntry `json:"after,omitempty"`
	// Binary marks a file whose content is not text: no unified diff.
	Binary bool `json:"binary,omitempty"`
	// Unified is the unified text diff of a text file, capped; Truncated
	// says it was cut (or not made: the file is too large to diff).
	Unified   string `json:"unified,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Diff is what changed from one state to another.
type Diff struct {
	// From and To name the states: a snapshot id, or "now".
	From    string   `json:"from"`
	To      string   `json:"to"`
	Changes []Change `json:"changes"`
	// Counts of changes by kind.
	Added    int `json:"added"`
	Deleted  int `json:"deleted"`
	Modified int `json:"modified"`
	Other    int `json:"other"`
	// Truncated says text diffs were cut or left out to stay within
	// DiffLimits.
	Truncated bool `json:"truncated,omitempty"`
}

// Compare lists what changed from a to b (both sorted by path): every
// path added, deleted, or changed in content, mode, type or symlink
// target. Modification times alone are no change.
func Compare(from, to string, a, b []sandbox.TreeEntry) *Diff {
	d := &Diff{From: from, To: to, Changes: []Change{}}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Path < b[j].Path):
			e := a[i]
			d.Add(Change{Path: e.Path, Kind: ChangeDeleted, Before: &e})
			i++
		case i == len(a) || b[j].Path < a[i].Path:
			e := b[j]
			d.Add(Change{Path: e.Path, Kind: ChangeAdded, After: &e})
			j++
		default:
			x, y := a[i], b[j]
			i++
			j++
			kind := ""
			switch {
			case x.Type != y.Type:
				kind = ChangeType
			case x.Type == sandbox.EntryFile && x.Digest != y.Digest:
				kind = ChangeModified
			case x.Type == sandbox.EntrySymlink && x.Target != y.Target:
				kind = ChangeSymlink
			case x.Mode != y.Mode && x.Type != sandbox.EntrySymlink:
				kind = ChangeMode
			}
			if kind != "" {
				d.Add(Change{Path: x.Path, Kind: kind, Before: &x, After: &y})
			}
		}
	}
	return d
}

// Add appends c and counts it by its kind.
func (d *Diff) Add(c Change) {
	d.Changes = append(d.Changes, c)
	switch c.Kind {
	case ChangeAdded:
		d.Added++
	case ChangeDeleted:
		d.Deleted++
	case ChangeModified:
		d.Modified++
	default:
		d.Other++
	}
}

// DiffLimits cap the text diffs of a Diff.
type DiffLimits struct {
	// FileBytes: a file larger than this is not diffed. 1 MiB.
	FileBytes int64
	// PerFile caps one file's unified diff. 64 KiB.
	PerFile int
	// Total caps all unified diffs together. 1 MiB.
	Total int
}

// WithDefaults fills l's zero fields.
func (l DiffLimits) WithDefaults() DiffLimits {
	if l.FileBytes == 0 {
		l.FileBytes = 1 << 20
	}
	if l.PerFile == 0 {
		l.PerFile = 64 << 10
	}
	if l.Total == 0 {
		l.Total = 1 << 20
	}
	return l
}

// Open reads the content of a file entry for AddText: of the state the
// diff is from, or (after) of the state it is to.
type Open func(ctx context.Context, e *sandbox.TreeEntry, after bool) (io.ReadCloser, error)

// AddText adds unified diffs to the changes of text files (added, deleted
// or modified), and marks binary ones, reading content with open.
func (d *Diff) AddText(ctx context.Context, open Open, lim DiffLimits) error {
	lim = lim.WithDefaults()
	total := 0
	read := func(e *sandbox.TreeEntry, after bool) ([]byte, error) {
		if e == nil || e.Type != sandbox.EntryFile {
			return nil, nil
		}
		r, err := open(ctx, e, after)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(io.LimitReader(r, lim.FileBytes+1))
	}
	for i := range d.Changes {
		c := &d.Changes[i]
		isFile := func(e *sandbox.TreeEntry) bool { return e != nil && e.Type == sandbox.EntryFile }
		if !isFile(c.Before) && !isFile(c.After) {
			continue
		}
		if c.Kind != ChangeAdded && c.Kind != ChangeDeleted && c.Kind != ChangeModified && c.Kind != ChangeType {
			continue
		}
		if (isFile(c.Before) && c.Before.Size > lim.FileBytes) || (isFile(c.After) && c.After.Size > lim.FileBytes) {
			c.Truncated = true
			d.Truncated = true
			continue
		}
		if total >= lim.Total {
			c.Truncated, d.Truncated = true, true
			continue
		}
		a, err := read(c.Before, false)
		if err != nil {
			return fmt.Errorf("diff %s: %w", c.Path, err)
		}
		b, err := read(c.After, true)
		if err != nil {
			return fmt.Errorf("diff %s: %w", c.Path, err)
		}
		if !IsText(a) || !IsText(b) {
			c.Binary = true
			continue
		}
		from, to := "a"+c.Path, "b"+c.Path
		if !isFile(c.Before) {
			from = "/dev/null"
		}
		if !isFile(c.After) {
			to = "/dev/null"
		}
		u := Unified(from, to, string(a), string(b))
		capAt := min(lim.PerFile, lim.Total-total)
		if len(u) > capAt {
			u = cutLines(u, capAt)
			c.Truncated, d.Truncated = true, true
		}
		c.Unified = u
		total += len(u)
	}
	return nil
}

// cutLines cuts s to at most n bytes, at a line's end.
func cutLines(s string, n int) string {
	s = s[:n]
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return ""
}

// IsText says b looks like text: valid UTF-8 without NUL bytes in its
// first 8 KiB.
func IsText(b []byte) bool {
	head := b[:min(len(b), 8<<10)]
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	if utf8.Valid(head) {
		return true
	}
	// A multi-byte character cut at 8 KiB is still text.
	for k := 1; k < 4 && k < len(head); k++ {
		if utf8.Valid(head[:len(head)-k]) {
			return true
		}
	}
	return false
}

// Text renders d for people: one line per change, then the unified diffs.
// Everything from the sandbox is rendered as termsafe does (paths as
// names, content as text: a control, bidi or zero-width character shows
// as ⟨U+XXXX⟩, never reaching a terminal as itself), and a file whose
// diff holds any is marked, on its line and after its diff.
func (d *Diff) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff %s → %s: %d added, %d deleted, %d modified, %d other\n", termsafe.Name(d.From), termsafe.Name(d.To), d.Added, d.Deleted, d.Modified, d.Other)
	for _, c := range d.Changes {
		fmt.Fprintf(&b, "%-8s %s%s\n", c.Kind, quotePath(c.Path), detail(c))
	}
	for _, c := range d.Changes {
		if c.Unified != "" {
			b.WriteString(termsafe.Text(c.Unified))
			if c.Truncated {
				b.WriteString("\\ diff cut here (too long)\n")
			}
			if n := termsafe.Count(c.Unified); n > 0 {
				fmt.Fprintf(&b, "\\ %s: %d control or invisible characters (escape sequences?), shown as ⟨U+…⟩\n", quotePath(c.Path), n)
			}
		}
	}
	if d.Truncated {
		b.WriteString("(some text diffs were cut or left out: too large)\n")
	}
	return b.String()
}

// quotePath shows a path (or a symlink's target) with every character a
// terminal would not show as itself marked.
func quotePath(p string) string { return termsafe.Name(p) }

func detail(c Change) string {
	if c.Before == nil && c.After == nil {
		return "" // a listing from elsewhere that names neither side
	}
	if c.Before == nil || c.After == nil {
		c.Kind = "" // only one side to show, whatever the kind says
	}
	switch c.Kind {
	case ChangeMode:
		return fmt.Sprintf(" (%04o → %04o)", c.Before.Mode, c.After.Mode)
	case ChangeSymlink:
		return fmt.Sprintf(" (%s → %s)", quotePath(c.Before.Target), quotePath(c.After.Target))
	case ChangeType:
		return fmt.Sprintf(" (%s → %s)", c.Before.Type, c.After.Type)
	}
	e := c.After
	if e == nil {
		e = c.Before
	}
	s := " (" + e.Type
	if e.Type == sandbox.EntryFile {
		s += fmt.Sprintf(", %d bytes", e.Size)
	}
	if e.Type == sandbox.EntrySymlink {
		s += " → " + quotePath(e.Target)
	}
	if c.Binary {
		s += ", binary"
	}
	if termsafe.Count(c.Unified) > 0 {
		s += ", control characters"
	}
	return s + ")"
}
