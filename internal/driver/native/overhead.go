package native

import (
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The agent's own room, beside the files it writes for the file API:
// memory and threads.
const (
	agentMemory = 128 << 20
	agentPids   = 256
)

// agentLimits are the limits of the agent's cgroup (makeCgroups): room
// for the files it writes on the workload's behalf (the tmpfs mounts) and
// its own, and a thread cap of its own.
func agentLimits(l sandbox.Limits) cgroup.Limits {
	return cgroup.Limits{MemoryBytes: l.DiskBytes + l.TmpBytes + agentMemory, Pids: agentPids}
}

// overhead is what a sandbox with limits l costs the host beyond them:
// what its two cgroups (the workload's, with its limits, and the agent's)
// allow beyond PinnableBytes, the agent's threads, and the descriptors
// the host holds for it.
func overhead(l sandbox.Limits, persistent bool) sandbox.Overhead {
	o := sandbox.Overhead{
		MemoryBytes: max(l.MemoryBytes+agentLimits(l).MemoryBytes-l.PinnableBytes(), 0),
		Tasks:       agentPids,
		// `airlock serve` (persistent) holds the agent's connection and
		// its pidfd (the agent holds the sandbox's locks): 2, measured. A
		// one-shot run holds the locks and the agent's log pipe too.
		Descriptors: 2,
	}
	if !persistent {
		o.Descriptors = 5
	}
	return o
}

// Overhead is what a sandbox of spec costs the host beyond its limits
// (sandbox.Overheader): admission counts it.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	return overhead(spec.Limits.WithDefaults(), d.persistent())
}
