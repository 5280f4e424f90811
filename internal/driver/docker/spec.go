package docker

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Where the agent lives in a container, and as what.
const (
	// agentDir is where the agent's volume is mounted, read-only: in the
	// container's own /dev (a tmpfs the engine makes), so that its mount
	// point is not made in the image's root; the agent moves it into its
	// own directory once it runs. The binary is in agentBinDir below it, a
	// directory only root may enter.
	agentDir    = "/dev/.airlock"
	agentBinDir = agentDir + "/agent"
	// agentName is the binary's name, and the agent's argv[0].
	agentName = "airlock-agent"
	// agentHome is the agent's own directory, only root may enter (see
	// agent.ContainedConfig.Home); the agent moves its volume there, so
	// relays run agentRelayDir/airlock-agent.
	agentHome     = "/tmp/.agent"
	agentRelayDir = agentHome + "/bin/agent"
	// sessionSocket is where the agent listens for later host sessions
	// (agent.ContainedConfig.Listen), reached through a relay.
	sessionSocket = agentHome + "/sock"
	// chrootDir is the commands' chroot where the agent gives them cgroup
	// v2 groups (see agent.ContainedConfig.ChrootDir).
	chrootDir = agentHome + "/root"
	// hostname is every sandbox's host name.
	hostname = "sandbox"
	// Workload uid and gid; the agent is uid 0 of the container.
	workloadUID = 1000
	workloadGID = 1000
)

// agentCaps are the container's capabilities, the agent's (docs/decisions.md,
// 7): finish the sandbox (unmount /sys, cgroups inside, the commands'
// chroot), start commands as the workload and signal them. Commands get
// none: the agent starts each from a thread that dropped the bounding set,
// as uid 1000, with no_new_privs and its own seccomp filter.
var agentCaps = []string{
	"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP", "CAP_SYS_ADMIN",
	"CAP_SYS_CHROOT", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
}

// Room for what the container holds besides the workload: the agent (a Go
// program, a dozen threads, about 10 MiB), and for a user-space kernel or a
// virtual machine, the kernel too.
const (
	agentMemory   = 32 << 20
	kernelMemory  = 96 << 20
	agentPids     = 128
	cpuNanosPerCo = 1e9
)

// vmRuntime says whether runtime gives the container a kernel of its own
// (gVisor, Kata): then uids are not shared with other containers, and the
// container's memory holds that kernel too.
func vmRuntime(runtime string) bool {
	r := strings.ToLower(runtime)
	return strings.Contains(r, "runsc") || strings.Contains(r, "gvisor") || strings.Contains(r, "kata")
}

// containerSpec is what one sandbox's container is made from.
type containerSpec struct {
	Spec     sandbox.Spec // with defaults and ID
	Image    string
	Runtime  string
	Instance string
	// AgentVolume is the named volume that holds the agent's binary.
	AgentVolume string
	// Persistent: the container outlives the process that made it.
	Persistent bool
}

// create returns the container's configuration: the agent as its only
// process, root of the container with agentCaps and no_new_privs, under
// the engine's default seccomp profile; a read-only root from the image
// (with a kernel of the runtime's own, gVisor or Kata, the agent makes it
// read-only in that kernel once it has removed /sys: a read-only root
// there keeps the image's names),
// sized tmpfs /workspace, /tmp and /dev/shm; no network; memory without
// swap, CPU and pids limits; private namespaces, cgroup namespace
// included; the caller's mounts, read-only unless writable; nothing logged
// by the engine (the attach stream carries the protocol).
func (c containerSpec) create() (*container.Config, *container.HostConfig) {
	l := c.Spec.Limits
	labels := map[string]string{LabelSandbox: c.Spec.ID, LabelDaemon: c.Instance}
	cfg := &container.Config{
		Hostname:     hostname,
		User:         "0:0",
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		OpenStdin:    true,
		// A persistent container's stdin stays open when its host goes, so
		// that the agent outlives its sessions; otherwise it closes, and
		// the agent ends.
		StdinOnce: !c.Persistent,
		// Only what finds the agent: commands get their environment from
		// the agent, never from here.
		Env:        []string{"PATH=" + agentBinDir},
		Entrypoint: []string{agentName, agent.StdioArg},
		Cmd:        []string{},
		Image:      c.Image,
		WorkingDir: "/",
		Labels:     labels,
	}
	o := overhead(l, c.Runtime)
	memory := l.MemoryBytes + o.MemoryBytes
	pids := int64(l.Pids) + o.Tasks
	swappiness := int64(0)
	tmpfs := func(size int64, extra ...string) string {
		o := append([]string{"rw", "nosuid", "nodev", "size=" + strconv.FormatInt(size, 10)}, extra...)
		return strings.Join(o, ",")
	}
	hc := &container.HostConfig{
		Runtime:        c.Runtime,
		NetworkMode:    "none",
		ReadonlyRootfs: !vmRuntime(c.Runtime),
		CapDrop:        []string{"ALL"},
		CapAdd:         slices.Clone(agentCaps),
		SecurityOpt:    []string{"no-new-privileges"},
		CgroupnsMode:   container.CgroupnsModePrivate,
		IpcMode:        container.IPCModePrivate,
		PidMode:        "",
		Privileged:     false,
		ShmSize:        l.TmpBytes,
		Tmpfs: map[string]string{
			sandbox.Workspace: tmpfs(l.DiskBytes, "exec", "mode=0755", "uid="+strconv.Itoa(workloadUID), "gid="+strconv.Itoa(workloadGID)),
			"/tmp":            tmpfs(l.TmpBytes, "exec", "mode=1777"),
		},
		LogConfig: container.LogConfig{Type: "none"},
		// What is not persistent is removed when it stops.
		AutoRemove: !c.Persistent,
		Resources: container.Resources{
			Memory:           memory,
			MemorySwap:       memory, // memory plus swap: no swap
			MemorySwappiness: &swappiness,
			NanoCPUs:         int64(l.CPUs * cpuNanosPerCo),
			PidsLimit:        &pids,
		},
		Mounts: []mount.Mount{{
			Type: mount.TypeVolume, Source: c.AgentVolume, Target: agentDir, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}},
	}
	// The caller's mounts, parents first, read-only unless writable.
	user := slices.Clone(c.Spec.Mounts)
	slices.SortStableFunc(user, func(a, b sandbox.Mount) int { return len(a.Target) - len(b.Target) })
	for _, m := range user {
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: !m.Writable,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	return cfg, hc
}

// agentConfig is the agent's Config for a sandbox made from spec (with
// defaults), whose image sets imageEnv: the engine built the root and
// mounted everything; the agent gets the limits it enforces inside and how
// to treat commands.
func agentConfig(spec sandbox.Spec, runtime string, imageEnv []string, persistent bool) *agent.Config {
	l := spec.Limits
	// The engine mounts them; the agent needs the writable ones for its
	// Landlock rules.
	var mounts []agent.MountConfig
	for _, m := range spec.Mounts {
		if m.Writable {
			mounts = append(mounts, agent.MountConfig{Target: m.Target, Writable: true})
		}
	}
	listen := ""
	if persistent {
		listen = sessionSocket
	}
	return &agent.Config{
		Mounts:   mounts,
		Hostname: hostname, DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: workloadUID, GID: workloadGID, Env: append(commandEnv(imageEnv), spec.Env...),
		OpenFiles: l.OpenFiles, FileSize: l.DiskBytes,
		Contained: &agent.ContainedConfig{
			Pids: l.Pids, ChrootDir: chrootDir, Listen: listen,
			AgentVolume: agentDir, Home: agentHome, MaskProc: !vmRuntime(runtime),
			CgroupV1: true, SharedUIDs: !vmRuntime(runtime), ReadOnlyRoot: vmRuntime(runtime),
		},
	}
}

// commandEnv is what of an image's environment commands get: all of it
// (PATH, LANG, what the image's software needs) but the names the agent
// sets for every command itself.
func commandEnv(imageEnv []string) []string {
	var out []string
	for _, kv := range imageEnv {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		switch k {
		case "HOME", "USER", "HOSTNAME":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// containerName is the name of sandbox id's container.
func containerName(id string) string { return "airlock-" + id }

// agentVolumeName is the name of the volume that holds the agent whose
// sha256 is sum (hex).
func agentVolumeName(sum string) string { return "airlock-agent-" + sum[:16] }

// agentTarEntry is where the binary is inside the agent's volume.
var agentTarEntry = path.Join(strings.TrimPrefix(agentBinDir, agentDir+"/"), agentName)
