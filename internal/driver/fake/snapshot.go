package fake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

var _ sandbox.Snapshotter = (*Instance)(nil)

// Capture captures the in-memory trees below req.Roots.
func (in *Instance) Capture(ctx context.Context, req sandbox.CaptureRequest, put sandbox.BlobPut) (sandbox.Capture, error) {
	t := in.files
	t.mu.Lock()
	type item struct {
		e    sandbox.TreeEntry
		data []byte
	}
	var items []item
	var total int64
	for p, n := range t.nodes {
		if !underRoots(p, req.Roots) {
			continue
		}
		e := sandbox.TreeEntry{Path: p, Mode: uint32(n.mode.Perm()), MTime: n.mtime.UnixNano()}
		switch {
		case n.dir:
			e.Type = sandbox.EntryDir
			e.MTime = 0
		case n.target != "":
			e.Type, e.Target, e.Mode = sandbox.EntrySymlink, n.target, 0o777
		default:
			e.Type, e.Size = sandbox.EntryFile, int64(len(n.data))
			total += e.Size
		}
		items = append(items, item{e, bytes.Clone(n.data)})
	}
	t.mu.Unlock()
	if req.MaxFiles > 0 && len(items) > req.MaxFiles {
		return sandbox.Capture{}, fmt.Errorf("more than %d files and directories: the snapshot quota of this key allows no more: %w", req.MaxFiles, sandbox.ErrLimit)
	}
	if req.MaxBytes > 0 && total > req.MaxBytes {
		return sandbox.Capture{}, fmt.Errorf("the files hold more than %d bytes: the snapshot quota of this key allows no more: %w", req.MaxBytes, sandbox.ErrLimit)
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.e.Path, b.e.Path) })
	var c sandbox.Capture
	for _, it := range items {
		if it.e.Type == sandbox.EntryFile {
			h := sha256.Sum256(it.data)
			it.e.Digest = "sha256:" + hex.EncodeToString(h[:])
			if req.Have == nil || !req.Have(it.e.Digest) {
				d, n, err := put(ctx, bytes.NewReader(it.data))
				if err != nil {
					return sandbox.Capture{}, err
				}
				it.e.Digest = d
				c.SentFiles++
				c.SentBytes += n
			}
		}
		c.Entries = append(c.Entries, it.e)
	}
	return c, nil
}

// Apply makes the in-memory trees below req.Roots exactly req.Entries.
func (in *Instance) Apply(ctx context.Context, req sandbox.ApplyRequest, get sandbox.BlobGet) (sandbox.ApplyStats, error) {
	nodes := map[string]*node{}
	var st sandbox.ApplyStats
	for _, e := range req.Entries {
		if err := e.Validate(req.Roots); err != nil {
			return st, err
		}
		n := &node{mode: fsMode(e.Mode), mtime: time.Unix(0, e.MTime)}
		switch e.Type {
		case sandbox.EntryDir:
			n.dir = true
		case sandbox.EntrySymlink:
			n.target = e.Target
		default:
			r, err := get(ctx, e.Digest)
			if err != nil {
				return st, err
			}
			n.data, err = io.ReadAll(r)
			r.Close()
			if err != nil {
				return st, err
			}
			st.Received += int64(len(n.data))
		}
		nodes[e.Path] = n
	}
	t := in.files
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range nodes {
		if _, ok := t.nodes[p]; !ok {
			st.Added++
		}
	}
	for p, old := range t.nodes {
		if underRoots(p, req.Roots) {
			n, ok := nodes[p]
			switch {
			case !ok:
				st.Removed++
			case old.dir != n.dir || old.target != n.target || !bytes.Equal(old.data, n.data) || old.mode != n.mode:
				st.Changed++
			}
			delete(t.nodes, p)
		}
	}
	for p, n := range nodes {
		t.nodes[p] = n
	}
	return st, nil
}

func underRoots(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// fsMode turns an entry's mode bits into an fs.FileMode.
func fsMode(m uint32) fs.FileMode {
	out := fs.FileMode(m & 0o777)
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}
