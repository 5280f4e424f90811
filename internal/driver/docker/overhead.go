package docker

import (
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// overhead is what a container with limits l on runtime costs beyond
// them (contained.Overhead): the container's spec (containerSpec) is
// given the limits plus the same.
func overhead(l sandbox.Limits, runtime string) sandbox.Overhead {
	o := contained.Overhead(l, contained.IsVMRuntime(runtime))
	// The attach stream, the engine's wait stream, the sandbox's lock: 3
	// a sandbox in `airlock serve` at rest, measured.
	o.Descriptors = 3
	return o
}
