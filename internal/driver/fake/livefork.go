package fake

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Live fork, for tests of the supervisor's (Driver.LiveForkable): a
// checkpoint writes an image file naming the source into the directory
// and keeps a copy of its file tree; a clone reads the file back and
// starts on a copy of that tree. CloneFail, when set, fails every clone.

var _ sandbox.LiveForker = (*Driver)(nil)

// Checkpoint writes in's image into dir; in runs on.
func (d *Driver) Checkpoint(_ context.Context, in sandbox.Instance, dir string) ([]byte, sandbox.Instance, error) {
	fi, ok := in.(*Instance)
	if !ok || !d.LiveForkable {
		return nil, in, fmt.Errorf("fake: %w: live fork", sandbox.ErrUnsupported)
	}
	if err := os.WriteFile(filepath.Join(dir, imageName), []byte("fake image of "+fi.spec.ID+"\n"), 0o600); err != nil {
		return nil, in, err
	}
	fi.files.mu.Lock()
	t := &tree{nodes: maps.Clone(fi.files.nodes)}
	fi.files.mu.Unlock()
	for p, n := range t.nodes {
		c := *n
		c.data = append([]byte(nil), n.data...)
		t.nodes[p] = &c
	}
	d.mu.Lock()
	if d.images == nil {
		d.images = map[string]*tree{}
	}
	d.images[fi.spec.ID] = t
	d.mu.Unlock()
	return []byte(fi.spec.ID), in, nil
}

// Clone starts sandbox spec.ID on a copy of the checkpoint's tree.
func (d *Driver) Clone(_ context.Context, spec sandbox.Spec, state []byte, dir string) (sandbox.Instance, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageName))
	if err != nil {
		return nil, err
	}
	src := string(state)
	if string(b) != "fake image of "+src+"\n" {
		return nil, fmt.Errorf("fake: %w: the image is not %s's", sandbox.ErrInvalid, src)
	}
	if d.CloneFail != nil {
		return nil, d.CloneFail
	}
	d.mu.Lock()
	img := d.images[src]
	d.mu.Unlock()
	if img == nil {
		return nil, fmt.Errorf("fake: no checkpoint of %s: %w", src, sandbox.ErrNotFound)
	}
	t := &tree{nodes: map[string]*node{}}
	for p, n := range img.nodes {
		c := *n
		c.data = append([]byte(nil), n.data...)
		t.nodes[p] = &c
	}
	spec.Limits = spec.Limits.WithDefaults()
	d.Created.Add(1)
	return &Instance{d: d, spec: spec, done: make(chan struct{}), files: t}, nil
}
