// Package symlink decides whether an untrusted symlink stays inside a
// directory tree: copy-on-write apply (host side), the CLI's archive
// unpacker and, in Python, the SDK's unpacker use the same walk, checked
// against the same test vectors (testdata/symlink-vectors.json at the
// repository's root).
//
// A target is not checked lexically (path.Join cleans "y/.." as if y were
// a directory, but y may itself be a link to "."). Resolve walks the raw
// target component by component against the tree as it will be after the
// operation: ".." pops, a name pushes, and a name that is a symlink in
// that tree (already there, or made by the operation) is replaced by its
// own target, up to MaxHops links. A walk that climbs above the root, or
// meets an absolute target, leaves the tree.
//
// It imports only the standard library, so the public Go client may use
// it.
package symlink

import (
	"errors"
	"fmt"
	"strings"
)

// Limits of one walk: a longer chain (or a loop) is refused.
const (
	// MaxHops is how many symlinks one walk may follow, the checked
	// link itself included (Linux's limit).
	MaxHops = 40
	// MaxSteps is how many components one walk may take, links'
	// targets included.
	MaxSteps = 1 << 13
	// MaxCost bounds the bytes of the paths one walk looks up, so that
	// many deep links cannot make a check slow: a walk past it is
	// refused. Real trees need a few kilobytes.
	MaxCost = 1 << 18
)

// Lookup says what the tree after the operation holds at rel (clean,
// relative to the root, never ".." or absolute, never "." — the root
// itself is a directory): the target of a symlink and true, or false for
// anything else (a directory, a file, nothing). An error ends the walk.
type Lookup func(rel string) (target string, isLink bool, err error)

// Map is a Lookup of the symlinks in m (relative path → target); every
// other path is not a link.
func Map(m map[string]string) Lookup {
	return func(rel string) (string, bool, error) {
		t, ok := m[rel]
		return t, ok, nil
	}
}

// ErrEscapes is what Resolve's errors wrap when a target leaves the
// root, or cannot be resolved within MaxHops.
var ErrEscapes = errors.New("the symlink leads outside the directory")

// Error says why the symlink at Name was refused.
type Error struct {
	Name, Target string
	// Reason says how it leaves: "absolute", "climbs above the root" or
	// "too many symlinks".
	Reason string
	// Via are the symlinks the walk passed through, in order.
	Via []string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("symlink %q -> %q: %s", e.Name, e.Target, e.Reason)
	if len(e.Via) > 0 {
		s += fmt.Sprintf(" (through %s)", strings.Join(quoted(e.Via), ", "))
	}
	return s
}

// Unwrap classes it as ErrEscapes.
func (e *Error) Unwrap() error { return ErrEscapes }

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// Resolve walks target, the target of the symlink at name (a clean path
// relative to the root), as the kernel would in the tree look describes,
// and returns where it lands (relative to the root; "." for the root
// itself) and the symlinks it passed through. It fails with an *Error
// (ErrEscapes) when the walk leaves the root: an absolute target (of the
// link or of a link it passes through), ".." above the root, or more than
// MaxHops links. A component that does not exist is taken as a directory
// (a later ".." pops it), which the kernel would refuse: the walk never
// accepts what the kernel would resolve outside.
func Resolve(name, target string, look Lookup) (string, []string, error) {
	refuse := func(reason string, via []string) (string, []string, error) {
		return "", via, &Error{Name: name, Target: target, Reason: reason, Via: via}
	}
	if target == "" {
		return refuse("empty target", nil)
	}
	if strings.HasPrefix(target, "/") {
		return refuse("an absolute target", nil)
	}
	// cur is the path resolved so far (each component a directory or
	// absent, never a link), and ends the length of cur at each depth.
	cur, ends := "", []int{}
	push := func(c string) {
		if cur != "" {
			cur += "/"
		}
		cur += c
		ends = append(ends, len(cur))
	}
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		for _, c := range strings.Split(name[:i], "/") {
			if c != "" && c != "." {
				push(c)
			}
		}
	}
	// todo is the rest of the walk, last component first (a stack).
	todo := reversed(strings.Split(target, "/"))
	var via []string
	cost := 0
	for steps := 0; len(todo) > 0; steps++ {
		if steps == MaxSteps || cost > MaxCost {
			return refuse("too long a walk (too many or too deep links)", via)
		}
		c := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(ends) == 0 {
				return refuse("it climbs above the directory", via)
			}
			ends = ends[:len(ends)-1]
			if len(ends) == 0 {
				cur = ""
			} else {
				cur = cur[:ends[len(ends)-1]]
			}
			continue
		}
		p := c
		if cur != "" {
			p = cur + "/" + c
		}
		cost += len(p)
		t, isLink, err := look(p)
		if err != nil {
			return "", via, fmt.Errorf("symlink %q -> %q: look up %q: %w", name, target, p, err)
		}
		if !isLink {
			push(c)
			continue
		}
		via = append(via, p)
		if len(via)+1 > MaxHops { // the link itself is the first hop
			return refuse(fmt.Sprintf("more than %d symlinks in a row (a loop?)", MaxHops), via)
		}
		if t == "" {
			return refuse(fmt.Sprintf("it goes through %q, a symlink with an empty target", p), via)
		}
		if strings.HasPrefix(t, "/") {
			return refuse(fmt.Sprintf("it goes through %q, a symlink to the absolute path %q", p, t), via)
		}
		// The link's target replaces it, resolved from its directory
		// (cur, unchanged).
		todo = append(todo, reversed(strings.Split(t, "/"))...)
	}
	if cur == "" {
		return ".", via, nil
	}
	return cur, via, nil
}

func reversed(ss []string) []string {
	for i, j := 0, len(ss)-1; i < j; i, j = i+1, j-1 {
		ss[i], ss[j] = ss[j], ss[i]
	}
	return ss
}
