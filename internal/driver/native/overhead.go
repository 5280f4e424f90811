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
// allow beyond PinnableBytes, and the agent's threads.
func overhead(l sandbox.Limits) sandbox.Overhead {
	return sandbox.Overhead{
		MemoryBytes: max(l.MemoryBytes+agentLimits(l).MemoryBytes-l.PinnableBytes(), 0),
		Tasks:       agentPids,
		// The agent's connection and pidfd, the sandbox's lock and its
		// uid range's: 4 a sandbox in `airlock serve` at rest, measured.
		Descriptors: 4,
	}
}

// Overhead is what a sandbox of spec costs the host beyond its limits
// (sandbox.Overheader): admission counts it.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	return overhead(spec.Limits.WithDefaults())
}
