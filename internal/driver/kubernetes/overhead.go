package kubernetes

import (
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// overhead is what a Pod costs beyond its sandbox's limits: room for the
// agent, and on a RuntimeClass with a kernel of its own (vm) for that
// kernel too. The Pod's memory limit (podSpec.pod) is the same; its tasks
// are the node's to bound.
func overhead(vm bool) sandbox.Overhead {
	return sandbox.Overhead{MemoryBytes: contained.Overhead(sandbox.Limits{}, vm).MemoryBytes}
}

// Overhead is what a sandbox of spec costs beyond its limits
// (sandbox.Overheader), on the cluster's nodes: the key's memory quota
// counts it. Whether its RuntimeClass gives a kernel of its own is what
// the driver found when it last used it, else what its name says.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	class := spec.Runtime
	if class == "" {
		class = d.opts.RuntimeClass
	}
	d.mu.Lock()
	rc, ok := d.classes[class]
	d.mu.Unlock()
	if !ok {
		rc.vm = contained.IsVMRuntime(class)
	}
	return overhead(rc.vm)
}
