package sandbox

import (
	"context"
	"time"
)

// Optional features of drivers and instances, each an interface of its own,
// checked with a type assertion. Driver and Instance do not grow.

// Sweeper is a driver that can remove what sandboxes of airlock processes
// that died without cleaning up left on the host (processes, cgroups,
// mounts, containers, locks). A sandbox whose owner lives is never touched.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// UsageReader is an instance that can say what the whole sandbox uses now.
type UsageReader interface {
	// Usage reads the host's counters of the sandbox. An error wrapping
	// ErrUnsupported says the driver cannot see them.
	Usage(ctx context.Context) (SandboxUsage, error)
}

// SandboxUsage is what a whole sandbox uses, as the host counts it.
type SandboxUsage struct {
	// MemoryBytes is the memory in use now, file pages of its tmpfs
	// included where the host counts them.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryLimitBytes is the sandbox's memory limit.
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// CPUMS is the user+system CPU time used since the sandbox started.
	CPUMS int64 `json:"cpu_ms"`
	// CPUs is the CPU quota in cores.
	CPUs float64 `json:"cpus"`
	// At is when the counters were read.
	At time.Time `json:"at"`
}

// Describer is a driver that can say which backend it uses here, for
// `airlock doctor` and logs ("runsc v…, platform systrap").
type Describer interface {
	Describe() string
}

// Resizer is a process started on a terminal (ExecRequest.PTY) that can be
// resized: the programs on it get SIGWINCH and read the new size.
type Resizer interface {
	// Resize sets the terminal's size. An error wrapping ErrInvalid says
	// the process has no terminal or the size is out of range; one
	// wrapping ErrNotFound, that the process has ended.
	Resize(ctx context.Context, size TermSize) error
}
