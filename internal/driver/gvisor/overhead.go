package gvisor

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// The host cgroup's room for gVisor itself, measured on systrap: runsc, the
// Sentry, the gofer and the agent take about 35 host tasks and 22 MiB at
// rest, and every process inside adds up to 2 host tasks (its stub); the
// Sentry's own memory grows with what the workload does (page tables,
// file caches), hence the margin.
const (
	hostPidsPerProc = 3
	hostMemoryExtra = 96 << 20
)

// hostPidsBase is the host's process room for gVisor itself (a variable
// for the test that makes it too small).
var hostPidsBase int64 = 256

// overhead is what a sandbox with limits l costs the host beyond them:
// the host cgroup's room for gVisor itself (hostLimitsFor sets it).
func overhead(l sandbox.Limits) sandbox.Overhead {
	return sandbox.Overhead{
		MemoryBytes: hostMemoryExtra,
		Tasks:       int64(l.Pids)*(hostPidsPerProc-1) + hostPidsBase,
		// The agent's session, runsc's pidfd, the sandbox's lock: 3 a
		// sandbox in `airlock serve` at rest, measured.
		Descriptors: 3,
	}
}

// Overhead is what a sandbox of spec costs the host beyond its limits
// (sandbox.Overheader): admission counts it.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	return overhead(spec.Limits.WithDefaults())
}
