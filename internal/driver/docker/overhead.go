package docker

import (
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// overhead is what a container with limits l on runtime costs beyond
// them (contained.Overhead): the container's spec (containerSpec) is
// given the limits plus the same.
func overhead(l sandbox.Limits, runtime string) sandbox.Overhead {
	return contained.Overhead(l, contained.IsVMRuntime(runtime))
}
