package docker

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestOverhead: what the driver declares a sandbox costs beyond its limits
// (admission counts it) is what its container is given beyond them, on
// runc and on a runtime with a kernel of its own.
func TestOverhead(t *testing.T) {
	d := &Driver{opts: Options{Runtime: "runc"}}
	for _, runtime := range []string{"", "runc", "runsc", "kata-qemu"} {
		spec := sandbox.Spec{ID: "x", Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 32}.WithDefaults(), Runtime: runtime}
		c := containerSpec{Spec: spec, Image: "img", Runtime: runtime}
		if runtime == "" {
			c.Runtime = d.opts.Runtime
		}
		_, hc := c.create()
		o := d.Overhead(spec)
		if hc.Memory != spec.Limits.MemoryBytes+o.MemoryBytes || *hc.PidsLimit != int64(spec.Limits.Pids)+o.Tasks {
			t.Errorf("runtime %q: container memory %d pids %d; limits %d, %d and declared overhead %+v", runtime, hc.Memory, *hc.PidsLimit, spec.Limits.MemoryBytes, spec.Limits.Pids, o)
		}
		if vm := contained.IsVMRuntime(c.Runtime); (o.MemoryBytes == contained.KernelMemory) != vm {
			t.Errorf("runtime %q: overhead %+v", runtime, o)
		}
	}
}
