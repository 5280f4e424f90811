// Package fsroot serves the sandbox's file API: file operations whose paths
// are resolved strictly inside one root directory.
//
// The in-sandbox agent opens a Root on "/" after pivot_root, so the root is
// the sandbox's own root; tests open one on a temporary directory. The
// workload is hostile and can race every operation, so nothing here builds a
// host path and opens it: every path is first cleaned lexically (a ".." that
// would climb above the root is refused), then resolved by the kernel with
// openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) relative to the root's
// directory descriptor, and operations on a final component use the *at
// system calls on the parent's descriptor. Every system call runs with the
// workload's file-system identity, so the file API can do exactly what the
// workload itself could.
package fsroot

import (
	"fmt"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// maxPath bounds a path's length, as PATH_MAX does.
const maxPath = 4096

// cleanPath turns p, a path a caller gave, into a clean absolute path inside
// the root ("/" is the root itself). A relative p starts at workdir, which
// must be clean and absolute. It refuses an empty path or one holding a NUL
// byte (ErrInvalid), and a path whose ".." would climb above the root
// (ErrOutside), rather than silently clamping it as path.Clean does.
func cleanPath(workdir, p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("empty path: %w", sandbox.ErrInvalid)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, sandbox.ErrInvalid)
	case len(p) > maxPath:
		return "", fmt.Errorf("path %.40q... is longer than %d bytes: %w", p, maxPath, sandbox.ErrInvalid)
	}
	full := p
	if !strings.HasPrefix(p, "/") {
		full = workdir + "/" + p
	}
	depth := 0
	for elem := range strings.SplitSeq(full, "/") {
		switch elem {
		case "", ".":
		case "..":
			if depth == 0 {
				return "", fmt.Errorf("path %q climbs above the sandbox's root with \"..\": %w", p, sandbox.ErrOutside)
			}
			depth--
		default:
			depth++
		}
	}
	return path.Clean(full), nil
}

// splitPath cleans p like cleanPath for an operation on its final component
// (write, remove, rename) and returns the clean path, its parent directory
// and its final name. It refuses the root itself, and a p whose last
// element, as written, is "." or "..": "x/.." names the parent of x only
// by accident, never as the thing to remove or replace.
func splitPath(workdir, p string) (clean, dir, name string, err error) {
	clean, err = cleanPath(workdir, p)
	if err != nil {
		return "", "", "", err
	}
	trimmed := strings.TrimRight(p, "/")
	if last := trimmed[strings.LastIndexByte(trimmed, '/')+1:]; last == "." || last == ".." {
		return "", "", "", fmt.Errorf("path %q must end in a name, not %q: %w", p, last, sandbox.ErrInvalid)
	}
	if clean == "/" {
		return "", "", "", fmt.Errorf("path %q is the sandbox's root directory itself: %w", p, sandbox.ErrInvalid)
	}
	dir, name = path.Split(clean)
	return clean, path.Clean(dir), name, nil
}
