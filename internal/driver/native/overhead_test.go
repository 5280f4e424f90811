package native

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestOverhead: what the driver declares a sandbox costs beyond
// PinnableBytes is what its two cgroups (the workload's, at its memory
// limit, and the agent's: agentLimits) allow beyond it.
func TestOverhead(t *testing.T) {
	d := &Driver{}
	for _, l := range []sandbox.Limits{{}, {TmpBytes: 16 << 20}, {TmpBytes: 256 << 20}} {
		spec := sandbox.Spec{Limits: l}
		l = l.WithDefaults()
		cgroups := l.MemoryBytes + agentLimits(l).MemoryBytes
		o := d.Overhead(spec)
		if got := sandbox.HostBytes(d, spec); got != max(cgroups, l.PinnableBytes()) || o.Tasks != agentPids {
			t.Errorf("tmp %d: HostBytes %d, overhead %+v; cgroups allow %d, limits %d", l.TmpBytes, got, o, cgroups, l.PinnableBytes())
		}
	}
	if o := d.Overhead(sandbox.Spec{}); o.MemoryBytes != 64<<20 {
		t.Errorf("the defaults: %d MiB beyond the limits, want 64 (128 MiB of the agent's room, less /dev/shm's 64 counted already)", o.MemoryBytes>>20)
	}
}
