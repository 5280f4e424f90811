// Package contained is the contract of airlock's agent in a container
// (the Docker and Kubernetes drivers): where the agent lives in the
// container and as what, what the container holds besides the workload,
// how a runtime with a kernel of its own is told apart, and what a death by
// the memory limit says. The capabilities the agent is started with are
// agent.ContainedCaps, which the agent itself keeps.
package contained

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Where the agent lives in a container, and as what.
const (
	// AgentDir is where the agent's volume (Docker) or image volume
	// (Kubernetes) is mounted, read-only: in the container's own /dev (a
	// tmpfs the runtime makes), so that no mount point is made in the
	// image's root; the agent moves it into AgentHome once it runs
	// (agent.ContainedConfig.AgentVolume). The binary is in AgentBinDir
	// below it, a directory only root may enter.
	AgentDir    = "/dev/.airlock"
	AgentBinDir = AgentDir + "/agent"
	// AgentName is the binary's name, and the agent's argv[0].
	AgentName = "airlock-agent"
	// AgentHome is the agent's own directory, only root may enter
	// (agent.ContainedConfig.Home); relays run AgentRelayBin.
	AgentHome     = "/tmp/.agent"
	AgentRelayDir = AgentHome + "/bin/agent"
	AgentRelayBin = AgentRelayDir + "/" + AgentName
	// SessionSocket is where a persistent agent listens for later host
	// sessions (agent.ContainedConfig.Listen), reached through a relay.
	SessionSocket = AgentHome + "/sock"
	// ChrootDir is the commands' chroot where the agent gives them cgroup
	// v2 groups (agent.ContainedConfig.ChrootDir).
	ChrootDir = AgentHome + "/root"
	// Hostname is every sandbox's host name.
	Hostname = "sandbox"
	// The workload's uid and gid; the agent is uid 0 of the container.
	WorkloadUID = 1000
	WorkloadGID = 1000
)

// What the container holds besides the workload: the agent (a Go program,
// a dozen threads, about 10 MiB), and with a runtime of its own kernel
// (gVisor, Kata) that kernel too.
const (
	AgentMemory  = 32 << 20
	KernelMemory = 96 << 20
	AgentPids    = 128
)

// Overhead is what a container for a sandbox of limits l costs beyond
// them (sandbox.Overheader): the agent's room, or (vm) the runtime
// kernel's, whose threads and stubs count as the container's tasks too (2
// per process inside, 256 for itself). Memory and Pids, what the
// container is given, are the limits plus this.
func Overhead(l sandbox.Limits, vm bool) sandbox.Overhead {
	if vm {
		return sandbox.Overhead{MemoryBytes: KernelMemory, Tasks: int64(l.Pids)*2 + 256}
	}
	return sandbox.Overhead{MemoryBytes: AgentMemory, Tasks: AgentPids}
}

// Memory is the container's memory limit for a sandbox of limits l: the
// workload's, and the agent's or (vm) the runtime kernel's room.
func Memory(l sandbox.Limits, vm bool) int64 { return l.MemoryBytes + Overhead(l, vm).MemoryBytes }

// Pids is the container's process limit for a sandbox of limits l: the
// workload's and the agent's threads, or (vm) the runtime kernel's own
// threads and stubs too.
func Pids(l sandbox.Limits, vm bool) int64 { return int64(l.Pids) + Overhead(l, vm).Tasks }

// IsVMRuntime says whether a runtime (its name, or a RuntimeClass's name
// and handler) gives the container a kernel of its own (gVisor, Kata):
// then uids are not shared with other containers, and the container's
// memory holds that kernel too.
func IsVMRuntime(names ...string) bool {
	for _, n := range names {
		n = strings.ToLower(n)
		if strings.Contains(n, "runsc") || strings.Contains(n, "gvisor") || strings.Contains(n, "kata") {
			return true
		}
	}
	return false
}

// Holder names what holds the whole sandbox in the container: the agent,
// or (vm) the runtime's kernel.
func Holder(vm bool) string {
	if vm {
		return "the runtime's kernel"
	}
	return "the agent"
}

// OOMDeath is the death of a container that the memory limit killed.
func OOMDeath(l sandbox.Limits, vm bool) *agentdriver.Death {
	return agentdriver.OOMDeath(l, Holder(vm))
}

// Defaults fills in spec's image and runtime with the driver's (image,
// runtime). A spec left without an image is refused with need, which says
// how to name one.
func Defaults(spec *sandbox.Spec, image, runtime, need string) error {
	if spec.Image == "" {
		spec.Image = image
	}
	if spec.Image == "" {
		return fmt.Errorf("%w: %s", sandbox.ErrInvalid, need)
	}
	if spec.Runtime == "" {
		spec.Runtime = runtime
	}
	return nil
}
