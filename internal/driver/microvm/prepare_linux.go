package microvm

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Prepare makes what microVM sandboxes need, into the cache: the guest
// kernel (fetched with apt unless the cache has it, then kept), the
// initramfs, the default root image, and the snapshot of a sandbox with
// each of limits (defaults for zero fields). progress gets a line per
// step. It is what `airlock microvm prepare` and `make microvm-assets`
// run; a create builds what is missing too, except the kernel.
func (d *Driver) Prepare(ctx context.Context, limits []sandbox.Limits, progress func(string, ...any)) error {
	start := time.Now()
	k, err := fetchKernel(ctx, d.cache, progress)
	if err != nil {
		return err
	}
	progress("guest kernel %s (%s %s)", k.Release, k.Package, k.Version)
	for _, l := range limits {
		spec := sandbox.Spec{Limits: l.WithDefaults()}
		s, err := d.shapeFor(ctx, spec)
		if err != nil {
			return err
		}
		progress("initramfs %s, root image %s", s.Initramfs.Path, s.Root.Path)
		if d.opts.Cold {
			continue
		}
		t := time.Now()
		snap, err := d.snapshotFor(ctx, s)
		if err != nil {
			return err
		}
		progress("snapshot %s (%d MiB RAM, %d vCPU, %s) ready after %v", snap.Key, s.MemoryMiB, s.VCPUs, s.Accel, time.Since(t).Round(time.Millisecond))
	}
	progress("microvm assets ready in %v (cache %s)", time.Since(start).Round(time.Millisecond), d.cache)
	return nil
}
