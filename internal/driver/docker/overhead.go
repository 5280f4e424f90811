package docker

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// overhead is what a container with limits l on runtime costs beyond
// them: room for the agent, and on a runtime with a kernel of its own
// (vmRuntime) for that kernel too, whose threads and stubs count as the
// container's tasks (as gVisor's do: 2 per process inside, 256 for
// itself). The container's spec (containerSpec) sets the same.
func overhead(l sandbox.Limits, runtime string) sandbox.Overhead {
	if vmRuntime(runtime) {
		return sandbox.Overhead{MemoryBytes: kernelMemory, Tasks: int64(l.Pids)*2 + 256}
	}
	return sandbox.Overhead{MemoryBytes: agentMemory, Tasks: agentPids}
}
