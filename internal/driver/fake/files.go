package fake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// tree is an in-memory file system: /workspace and /tmp, writable, and
// the home (Spec.Home) when there is one: a directory of its own, not
// the same files as /workspace as a driver's agent makes it.
type tree struct {
	mu    sync.Mutex
	nodes map[string]*node // clean absolute path → node
}

type node struct {
	dir    bool
	target string // a symlink's
	data   []byte
	mode   fs.FileMode
	mtime  time.Time
}

func newTree(home string) *tree {
	now := time.Now()
	t := &tree{nodes: map[string]*node{
		"/":          {dir: true, mode: 0o755, mtime: now},
		"/workspace": {dir: true, mode: 0o755, mtime: now},
		"/tmp":       {dir: true, mode: 0o1777, mtime: now},
	}}
	if home != "" {
		t.nodes[path.Dir(home)] = &node{dir: true, mode: 0o755, mtime: now}
		t.nodes[home] = &node{dir: true, mode: 0o755, mtime: now}
	}
	return t
}

var _ sandbox.Files = (*tree)(nil)

// clean resolves p (relative to /workspace) to a clean absolute path that
// must stay inside the sandbox.
func clean(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q: %w", p, sandbox.ErrInvalid)
	}
	if !path.IsAbs(p) {
		p = path.Join(sandbox.Workspace, p)
	}
	return path.Clean(p), nil
}

// lookup returns the node at p, whose parent must be a directory.
func (t *tree) lookup(p string) (string, *node, error) {
	c, err := clean(p)
	if err != nil {
		return "", nil, err
	}
	n, ok := t.nodes[c]
	if !ok {
		return c, nil, fmt.Errorf("%s: %w", c, sandbox.ErrNotFound)
	}
	return c, n, nil
}

func (t *tree) parent(c string) error {
	if p, ok := t.nodes[path.Dir(c)]; !ok || !p.dir {
		return fmt.Errorf("%s: the parent is not a directory: %w", c, sandbox.ErrNotFound)
	}
	return nil
}

func (t *tree) ReadFile(_ context.Context, p string, offset, limit int64, w io.Writer) error {
	t.mu.Lock()
	c, n, err := t.lookup(p)
	if err == nil && n.dir {
		err = fmt.Errorf("%s is a directory: %w", c, sandbox.ErrInvalid)
	}
	var data []byte
	if err == nil {
		data = n.data[min(offset, int64(len(n.data))):]
		if limit > 0 && int64(len(data)) > limit {
			data = data[:limit]
		}
		data = bytes.Clone(data)
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (t *tree) WriteFile(_ context.Context, p string, r io.Reader, mode fs.FileMode) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := clean(p)
	if err != nil {
		return err
	}
	if err := t.parent(c); err != nil {
		return err
	}
	if n, ok := t.nodes[c]; ok && n.dir {
		return fmt.Errorf("%s is a directory: %w", c, sandbox.ErrExists)
	}
	if mode == 0 {
		mode = 0o644
	}
	t.nodes[c] = &node{data: data, mode: mode.Perm(), mtime: time.Now()}
	return nil
}

func (t *tree) info(c string, n *node) sandbox.FileInfo {
	fi := sandbox.FileInfo{Name: path.Base(c), Path: c, Size: int64(len(n.data)), Mode: n.mode, ModTime: n.mtime, Type: "file"}
	switch {
	case n.dir:
		fi.Type, fi.Mode, fi.Size = "dir", n.mode|fs.ModeDir, 0
	case n.target != "":
		fi.Type, fi.Target, fi.Mode = "symlink", n.target, fs.ModeSymlink|0o777
	}
	return fi
}

func (t *tree) ReadDir(_ context.Context, p string) ([]sandbox.FileInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, n, err := t.lookup(p)
	if err != nil {
		return nil, err
	}
	if !n.dir {
		return nil, fmt.Errorf("%s is not a directory: %w", c, sandbox.ErrInvalid)
	}
	out := []sandbox.FileInfo{}
	for q, m := range t.nodes {
		if q != c && path.Dir(q) == c {
			out = append(out, t.info(q, m))
		}
	}
	slices.SortFunc(out, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (t *tree) Stat(_ context.Context, p string) (sandbox.FileInfo, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, n, err := t.lookup(p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return t.info(c, n), nil
}

func (t *tree) Mkdir(_ context.Context, p string, mode fs.FileMode) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := clean(p)
	if err != nil {
		return err
	}
	var chain []string
	for q := c; q != "/"; q = path.Dir(q) {
		chain = append([]string{q}, chain...)
	}
	for _, q := range chain {
		if n, ok := t.nodes[q]; ok {
			if !n.dir {
				return fmt.Errorf("%s exists and is not a directory: %w", q, sandbox.ErrExists)
			}
			continue
		}
		if mode == 0 {
			mode = 0o755
		}
		t.nodes[q] = &node{dir: true, mode: mode.Perm(), mtime: time.Now()}
	}
	return nil
}

func (t *tree) Remove(_ context.Context, p string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, _, err := t.lookup(p)
	if err != nil {
		return err
	}
	if c == "/" || c == sandbox.Workspace || c == "/tmp" {
		return fmt.Errorf("%s cannot be removed: %w", c, sandbox.ErrInvalid)
	}
	for q := range t.nodes {
		if q == c || strings.HasPrefix(q, c+"/") {
			delete(t.nodes, q)
		}
	}
	return nil
}

func (t *tree) Rename(_ context.Context, oldpath, newpath string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	oc, _, err := t.lookup(oldpath)
	if err != nil {
		return err
	}
	nc, err := clean(newpath)
	if err != nil {
		return err
	}
	if err := t.parent(nc); err != nil {
		return err
	}
	moved := map[string]*node{}
	for q, n := range t.nodes {
		if q == oc || strings.HasPrefix(q, oc+"/") {
			moved[nc+strings.TrimPrefix(q, oc)] = n
			delete(t.nodes, q)
		}
	}
	for q, n := range moved {
		t.nodes[q] = n
	}
	return nil
}

func (t *tree) Symlink(_ context.Context, target, p string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := clean(p)
	if err != nil {
		return err
	}
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("symlink %s: target %q: %w", c, target, sandbox.ErrInvalid)
	}
	if err := t.parent(c); err != nil {
		return err
	}
	if _, ok := t.nodes[c]; ok {
		return fmt.Errorf("%s: %w", c, sandbox.ErrExists)
	}
	t.nodes[c] = &node{target: target, mode: 0o777, mtime: time.Now()}
	return nil
}

// Resolve follows the symlinks of p's directories. (The fake's writes
// never follow a symlink, so NoFollow is the tree itself.)
func (t *tree) Resolve(_ context.Context, p string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, err := clean(p)
	if err != nil {
		return "", err
	}
	if c == "/" {
		return c, nil
	}
	dir, base := path.Dir(c), path.Base(c)
	for range 40 {
		resolved, changed := "/", false
		for _, part := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
			if part == "" {
				continue
			}
			next := path.Join(resolved, part)
			if n, ok := t.nodes[next]; ok && n.target != "" {
				target := n.target
				if !path.IsAbs(target) {
					target = path.Join(resolved, target)
				}
				next, changed = path.Clean(target), true
			}
			resolved = next
		}
		dir = resolved
		if !changed {
			return path.Join(dir, base), nil
		}
	}
	return "", fmt.Errorf("resolve %s: a symlink loop: %w", c, sandbox.ErrInvalid)
}

// NoFollow is the tree itself: its writes never follow a symlink.
func (t *tree) NoFollow() sandbox.Files { return t }
