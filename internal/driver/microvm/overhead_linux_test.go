package microvm

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestOverhead: what the driver declares a machine costs beyond
// PinnableBytes is what its host cgroup allows beyond it (makeCgroup sets
// hostMemory), more when it emulates, and never below nothing.
func TestOverhead(t *testing.T) {
	big := sandbox.Limits{MemoryBytes: 2 << 30, DiskBytes: 16 << 20, TmpBytes: 16 << 20}
	for _, tt := range []struct {
		accel string
		l     sandbox.Limits
		want  int64
	}{
		// Guest RAM 2176 MiB (2048 + 128, in steps of 128), QEMU 128 MiB;
		// PinnableBytes 2096 MiB.
		{"kvm", big, (2176 + 128 - 2096) << 20},
		{"tcg", big, (2176 + 128 + tcgCacheMiB - 2096) << 20},
		// The defaults: 768 MiB of cgroup for 896 MiB of limits.
		{"kvm", sandbox.Limits{}, 0},
	} {
		d := &Driver{opts: Options{Accel: tt.accel}}
		spec := sandbox.Spec{Limits: tt.l}
		o := d.Overhead(spec)
		l := tt.l.WithDefaults()
		if o.MemoryBytes != tt.want || o.Tasks != qemuPids {
			t.Errorf("%s, %+v: overhead %+v, want %d MiB and %d tasks", tt.accel, tt.l, o, tt.want>>20, qemuPids)
		}
		if got := hostMemory(guestMemoryMiB(l.MemoryBytes), tt.accel); sandbox.HostBytes(d, spec) != max(got, l.PinnableBytes()) {
			t.Errorf("%s: HostBytes %d, cgroup %d, limits %d", tt.accel, sandbox.HostBytes(d, spec), got, l.PinnableBytes())
		}
	}
}
