package microvm

import (
	"context"
	"errors"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
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

// BareBoot returns the command line of a bare QEMU boot of the guest a
// sandbox with limits l runs, to its init and out: the same machine,
// kernel, initramfs and kernel command line, no devices beyond the console,
// and an init that restarts the machine (QEMU then exits) as soon as it
// runs. It is the benchmark's baseline for a cold boot.
func (d *Driver) BareBoot(ctx context.Context, l sandbox.Limits) ([]string, error) {
	if err := d.Probe(ctx); err != nil {
		return nil, err
	}
	s, err := d.shapeFor(ctx, sandbox.Spec{Limits: l.WithDefaults()})
	if err != nil {
		return nil, err
	}
	q, ok := d.vmm.(*qemu)
	if !ok {
		return nil, errors.New("bare boot: the VMM is not QEMU")
	}
	m := s.machine()
	m.Cmdline = strings.TrimSuffix(m.Cmdline, agent.GuestArg) + agent.GuestExitArg
	return append([]string{q.path}, q.bareArgs(m)...), nil
}

// SnapshotMemory is the memory the loaded snapshots' RAM takes in this
// process (memfds), once, whatever the number of machines mapping it.
func (d *Driver) SnapshotMemory() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for _, s := range d.snaps {
		var st unix.Stat_t
		if unix.Fstat(int(s.RAM.Fd()), &st) == nil {
			n += st.Blocks * 512
		}
	}
	return n
}
