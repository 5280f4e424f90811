package docker

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// cpuNanosPerCo is a core in the engine's NanoCPUs.
const cpuNanosPerCo = 1e9

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
// process, root of the container with agent.ContainedCaps and no_new_privs, under
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
		Hostname:     contained.Hostname,
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
		Env:        []string{"PATH=" + contained.AgentBinDir},
		Entrypoint: []string{contained.AgentName, agent.StdioArg},
		Cmd:        []string{},
		Image:      c.Image,
		WorkingDir: "/",
		Labels:     labels,
	}
	memory := contained.Memory(l, contained.IsVMRuntime(c.Runtime))
	pids := contained.Pids(l, contained.IsVMRuntime(c.Runtime))
	swappiness := int64(0)
	tmpfs := func(size int64, extra ...string) string {
		o := append([]string{"rw", "nosuid", "nodev", "size=" + strconv.FormatInt(size, 10)}, extra...)
		return strings.Join(o, ",")
	}
	hc := &container.HostConfig{
		Runtime:        c.Runtime,
		NetworkMode:    "none",
		ReadonlyRootfs: !contained.IsVMRuntime(c.Runtime),
		CapDrop:        []string{"ALL"},
		CapAdd:         slices.Clone(agent.ContainedCaps),
		SecurityOpt:    []string{"no-new-privileges"},
		CgroupnsMode:   container.CgroupnsModePrivate,
		IpcMode:        container.IPCModePrivate,
		PidMode:        "",
		Privileged:     false,
		ShmSize:        l.TmpBytes,
		Tmpfs: map[string]string{
			sandbox.Workspace: tmpfs(l.DiskBytes, "exec", "mode=0755", "uid="+strconv.Itoa(contained.WorkloadUID), "gid="+strconv.Itoa(contained.WorkloadGID)),
			"/tmp":            tmpfs(l.TmpBytes, "exec", "mode=1777"),
		},
		LogConfig: container.LogConfig{Type: "none"},
		// The engine removes the container when it stops: when its agent
		// ends (a one-shot run's with its connection; a persistent one's
		// at its TTL with no daemon attached: docs/decisions.md, 51).
		AutoRemove: true,
		Resources: container.Resources{
			Memory:           memory,
			MemorySwap:       memory, // memory plus swap: no swap
			MemorySwappiness: &swappiness,
			NanoCPUs:         int64(l.CPUs * cpuNanosPerCo),
			PidsLimit:        &pids,
		},
		Mounts: []mount.Mount{{
			Type: mount.TypeVolume, Source: c.AgentVolume, Target: contained.AgentDir, ReadOnly: true,
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
// defaults), whose image sets imageEnv and workDir: the engine built the root and
// mounted everything; the agent gets the limits it enforces inside and how
// to treat commands.
func agentConfig(spec sandbox.Spec, runtime string, imageEnv []string, workDir string, persistent bool) *agent.Config {
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
		listen = contained.SessionSocket
	}
	return &agent.Config{
		Mounts:   mounts,
		Hostname: contained.Hostname, DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: contained.WorkloadUID, GID: contained.WorkloadGID, Env: append(commandEnv(imageEnv), spec.Env...),
		OpenFiles: l.OpenFiles, FileSize: l.DiskBytes, Home: spec.Home, WorkDir: workDir,
		Contained: &agent.ContainedConfig{
			Pids: l.Pids, ChrootDir: contained.ChrootDir, Listen: listen,
			AgentVolume: contained.AgentDir, Home: contained.AgentHome, MaskProc: !contained.IsVMRuntime(runtime),
			CgroupV1: true, SharedUIDs: !contained.IsVMRuntime(runtime), ReadOnlyRoot: contained.IsVMRuntime(runtime),
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
var agentTarEntry = path.Join(strings.TrimPrefix(contained.AgentBinDir, contained.AgentDir+"/"), contained.AgentName)
