package gvisor

import (
	"crypto/rand"
	"encoding/hex"
	"path"
	"slices"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ociVersion is the version the bundles declare: the oldest runsc airlock
// can fall back to (Debian's, 2022) speaks 1.0.2, and nothing newer is used.
const ociVersion = "1.0.2"

// Where the agent runs inside, and as what.
const (
	// agentDir holds the agent's binary, bound from the host; the agent
	// unmounts it and removes the directory before any command runs. It is
	// in /tmp, the sandbox's own tmpfs, so that its mount point is made
	// there and not in the root's directory on the host.
	agentDir = "/tmp/.agent"
	// agentName is the binary's name there, and the agent's argv[0].
	agentName = "airlock-agent"
	// sessionDir is where a persistent sandbox's session directory (the
	// bundle's, root's alone) is bound; the agent listens on sessionSock
	// in it. Below agentDir, which the agent closes to everybody else.
	sessionDir  = agentDir + "/session"
	sessionSock = "agent.sock"
	// hostname is every sandbox's host name.
	hostname = "sandbox"
	// Workload uid and gid inside every sandbox; the agent is uid 0 there.
	workloadUID = 1000
	workloadGID = 1000
)

// bind is a host path bound read-only into the composed root.
type bind struct {
	Source, Target string
}

// hostLimits bound the sandbox's cgroup on the host: gVisor's own
// processes (the Sentry, the gofer, one or two stub processes per process
// inside) and the workload together.
type hostLimits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	// Swap says the host's memory controller limits swap too (v1
	// memory.memsw); then swap is capped at nothing.
	Swap bool
}

const cpuPeriod = 100000 // µs

// hostLimitsFor sizes the host cgroup for a sandbox with limits l: its
// limits and gVisor's overhead (overhead.go).
func hostLimitsFor(l sandbox.Limits, swap bool) hostLimits {
	o := overhead(l)
	return hostLimits{
		MemoryBytes: l.MemoryBytes + o.MemoryBytes,
		CPUs:        l.CPUs,
		Pids:        int64(l.Pids) + o.Tasks,
		Swap:        swap,
	}
}

// bundle is what one sandbox's OCI spec is made from.
type bundle struct {
	// Rootfs is the host directory of the sandbox's root.
	Rootfs string
	// Binds are the composed root's read-only binds (/usr, the /etc
	// allowlist); none for a root given by the caller.
	Binds []bind
	// Hidden are directories of the composed root's /usr shown empty
	// (rootfs.HiddenUsr that the host has).
	Hidden []string
	// Mounts are the caller's mounts, already checked.
	Mounts []sandbox.Mount
	// Agent is the host path of the agent's binary.
	Agent string
	// CgroupsPath is the sandbox's cgroup below each hierarchy's root. The
	// spec names it and its resources for the record; airlock makes and
	// limits it, and starts runsc inside it with --ignore-cgroups.
	CgroupsPath string
	Limits      sandbox.Limits // with defaults
	Host        hostLimits
	// Session is the host directory of a persistent sandbox's session
	// socket; empty for a one-shot run's sandbox.
	Session string
}

// spec returns the OCI runtime spec of b: a read-only root with the
// composed or given root, /proc, a sized /tmp, /dev/shm and /workspace (the
// workload's), the caller's mounts (read-only unless writable), no network
// (runsc --network=none), its own pid, ipc, uts and mount namespaces, the
// host name "sandbox", and the agent as the one process, as uid 0 with
// only agent.ContainedCaps and no_new_privs.
func (b bundle) spec() *specs.Spec {
	l := b.Limits
	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
		// gVisor's own /dev (null, zero, full, random, urandom, tty, ptmx),
		// which it would mount anyway, but nosuid and noexec.
		{Destination: "/dev", Type: "tmpfs", Source: "dev", Options: []string{"nosuid", "noexec", "mode=0755"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
	}
	for _, m := range b.Binds {
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: ro})
	}
	for _, h := range b.Hidden {
		mounts = append(mounts, specs.Mount{Destination: h, Type: "tmpfs", Source: "tmpfs", Options: []string{"ro", "nosuid", "nodev", "noexec", "mode=0755"}})
	}
	mounts = append(mounts,
		specs.Mount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{
			"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(l.TmpBytes, 10)}},
		specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{
			"nosuid", "nodev", "noexec", "mode=1777", "size=" + strconv.FormatInt(l.TmpBytes, 10)}},
		specs.Mount{Destination: sandbox.Workspace, Type: "tmpfs", Source: "tmpfs", Options: []string{
			"nosuid", "nodev", "mode=0755", "size=" + strconv.FormatInt(l.DiskBytes, 10),
			"uid=" + strconv.Itoa(workloadUID), "gid=" + strconv.Itoa(workloadGID)}},
	)
	// Caller's mounts go below everything of the root's own, parents first.
	user := slices.Clone(b.Mounts)
	slices.SortStableFunc(user, func(a, b sandbox.Mount) int { return len(a.Target) - len(b.Target) })
	for _, m := range user {
		opt := "ro"
		if m.Writable {
			opt = "rw"
		}
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: []string{"rbind", opt, "nosuid", "nodev"}})
	}
	mounts = append(mounts, specs.Mount{Destination: path.Join(agentDir, agentName), Type: "bind", Source: b.Agent, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	if b.Session != "" {
		mounts = append(mounts, specs.Mount{Destination: sessionDir, Type: "bind", Source: b.Session, Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}})
	}

	memory := b.Host.MemoryBytes
	quota := int64(b.Host.CPUs * cpuPeriod)
	period := uint64(cpuPeriod)
	pids := b.Host.Pids
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &memory},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		Pids:   &specs.LinuxPids{Limit: &pids},
	}
	if b.Host.Swap {
		res.Memory.Swap = &memory // memory plus swap: no swap
	}
	caps := slices.Clone(agent.ContainedCaps)
	return &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{agentName, agent.StdioArg},
			// Only what finds the agent: commands get their environment
			// from the agent, never from here.
			Env: []string{"PATH=" + agentDir},
			Cwd: "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: b.Rootfs, Readonly: true},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: b.CgroupsPath,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
}

// agentConfig is the agent's Config for a sandbox made from spec (with
// defaults). runsc has built the root and mounted everything; the agent
// gets the limits it enforces inside and how to treat commands.
func agentConfig(spec sandbox.Spec) *agent.Config {
	l := spec.Limits
	cfg := &agent.Config{
		Hostname: hostname, DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: workloadUID, GID: workloadGID, Env: spec.Env, OpenFiles: l.OpenFiles,
		FileSize: l.DiskBytes, Home: spec.Home,
		Contained: &agent.ContainedConfig{Pids: l.Pids, AgentMount: path.Join(agentDir, agentName)},
	}
	if spec.Root == "" {
		// The composed root's /etc has the mount points of the sandbox's
		// own identity files (etcFiles); a given root may not.
		cfg.Contained.MachineID = newMachineID()
	}
	return cfg
}

// cgroupsPath is where a sandbox's host cgroup lives below each hierarchy.
func cgroupsPath(parent, id string) string { return "/" + path.Join(parent, id) }

// newMachineID is a sandbox's /etc/machine-id: 128 random bits in 32
// lower-case hex digits.
func newMachineID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
