package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestOverhead: what the driver declares a sandbox costs beyond its limits
// (the key's quota counts it) is what its Pod is given beyond them.
func TestOverhead(t *testing.T) {
	d := &Driver{opts: Options{RuntimeClass: DefaultRuntimeClass}, classes: map[string]runtimeClass{"plain": {}}}
	for _, class := range []string{"", "gvisor", "plain", RuntimeClassNone} {
		spec := sandbox.Spec{ID: "x", Limits: sandbox.Limits{MemoryBytes: 64 << 20}.WithDefaults(), Image: "img", Runtime: class}
		o := d.Overhead(spec)
		name := class
		if name == "" {
			name = DefaultRuntimeClass
		}
		p := podSpec{Spec: spec, Image: "img", RuntimeClass: name, VM: o.MemoryBytes == contained.KernelMemory}
		got := p.pod("ns").Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
		if got.Value() != spec.Limits.MemoryBytes+o.MemoryBytes {
			t.Errorf("class %q: Pod memory %d, limit %d and declared overhead %+v", class, got.Value(), spec.Limits.MemoryBytes, o)
		}
		if vm := contained.IsVMRuntime(name) && name != "plain"; (o.MemoryBytes == contained.KernelMemory) != vm {
			t.Errorf("class %q: overhead %+v, want the kernel's room: %v", class, o, vm)
		}
	}
}
