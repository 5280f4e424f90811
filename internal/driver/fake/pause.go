package fake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Pause with memory, for tests of the supervisor's pause (Driver.Pausable):
// a pause writes an image file naming the sandbox into the directory and
// keeps its file tree (its "memory") in the driver; a resume reads the
// file back and makes a new instance on the same tree.

var _ sandbox.Pauser = (*Driver)(nil)

// imageName is the pause image's file in its directory.
const imageName = "image"

// Pause writes in's image into dir and ends in.
func (d *Driver) Pause(_ context.Context, in sandbox.Instance, dir string) ([]byte, sandbox.Instance, error) {
	fi, ok := in.(*Instance)
	if !ok || !d.Pausable {
		return nil, in, fmt.Errorf("fake: %w: pause", sandbox.ErrUnsupported)
	}
	if err := os.WriteFile(filepath.Join(dir, imageName), []byte("fake image of "+fi.spec.ID+"\n"), 0o600); err != nil {
		return nil, in, err
	}
	d.mu.Lock()
	if d.paused == nil {
		d.paused = map[string]*tree{}
	}
	d.paused[fi.spec.ID] = fi.files
	d.mu.Unlock()
	fi.once.Do(func() { close(fi.done) })
	d.PausedCount.Add(1)
	return []byte(fi.spec.ID), nil, nil
}

// Resume makes sandbox id again on its kept tree, once its image reads
// back.
func (d *Driver) Resume(_ context.Context, id string, state []byte, dir string) (sandbox.Instance, error) {
	b, err := os.ReadFile(filepath.Join(dir, imageName))
	if err != nil {
		return nil, err
	}
	if string(b) != "fake image of "+id+"\n" || string(state) != id {
		return nil, fmt.Errorf("fake: %w: the image of %s is not its own", sandbox.ErrInvalid, id)
	}
	d.mu.Lock()
	t := d.paused[id]
	delete(d.paused, id)
	d.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("fake: paused sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	spec := sandbox.Spec{ID: id}
	spec.Limits = spec.Limits.WithDefaults()
	return &Instance{d: d, spec: spec, done: make(chan struct{}), files: t}, nil
}

// Discard forgets paused sandbox id.
func (d *Driver) Discard(_ context.Context, id string, _ []byte) error {
	d.mu.Lock()
	delete(d.paused, id)
	d.mu.Unlock()
	d.Discarded.Add(1)
	return nil
}

var _ sandbox.PauseFinder = (*Driver)(nil)

// Paused finds sandbox id among those paused and not resumed.
func (d *Driver) Paused(_ context.Context, id string, _ []byte) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.paused[id]; ok {
		return []byte(id), true
	}
	return nil, false
}

var (
	_ sandbox.Freezer        = (*Instance)(nil)
	_ sandbox.LifetimeSetter = (*Instance)(nil)
)

// Freeze marks the sandbox frozen (Driver.Freezable).
func (in *Instance) Freeze(context.Context) error {
	if !in.d.Freezable {
		return fmt.Errorf("fake: %w: freeze", sandbox.ErrUnsupported)
	}
	in.mu.Lock()
	in.frozen = true
	in.mu.Unlock()
	return nil
}

// Thaw marks it running again.
func (in *Instance) Thaw(context.Context) error {
	in.mu.Lock()
	in.frozen = false
	in.mu.Unlock()
	return nil
}

// Frozen reports whether the sandbox is frozen.
func (in *Instance) Frozen() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.frozen
}

// SetLifetime records what the holder of the sandbox was told.
func (in *Instance) SetLifetime(_ context.Context, left, idle, idleFor time.Duration) error {
	in.mu.Lock()
	in.lifetime = [3]time.Duration{left, idle, idleFor}
	in.mu.Unlock()
	return nil
}

// Lifetime is what the last SetLifetime said: the time to live left and
// the idle timeout.
func (in *Instance) Lifetime() (left, idle time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lifetime[0], in.lifetime[1]
}
