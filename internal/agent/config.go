package agent

import (
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// File descriptors the host hands the agent, in this order. Further
// descriptors follow: the cgroup directories (Config.Cgroup.FDs), then the
// detached mounts (Config.Mounts[i].FD).
const (
	FDConfig = 3 // a pipe: the host writes Config as JSON and closes it
	FDConn   = 4 // the connection the agent serves
	FDFirst  = 5 // the first descriptor named in Config
)

// Config tells the agent how to build the sandbox. The host writes it once
// to FDConfig at start.
type Config struct {
	// Hostname inside the sandbox.
	Hostname string `json:"hostname"`
	// Root is the descriptor of a detached mount to use as the root file
	// system, or 0 to compose one from the host's /usr and an /etc allowlist.
	Root int `json:"root,omitempty"`
	// Mounts are detached mounts (open_tree clones made by the host, already
	// read-only where they should be) to attach inside.
	Mounts []MountConfig `json:"mounts,omitempty"`
	// DiskBytes and TmpBytes size /workspace and /tmp.
	DiskBytes int64 `json:"disk_bytes"`
	TmpBytes  int64 `json:"tmp_bytes"`
	// UID and GID of workload commands inside the sandbox.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Env is added to every command's default environment.
	Env []string `json:"env,omitempty"`
	// Home, when set, is sandbox.Spec.Home: the agent binds /workspace
	// there (a tmpfs over its parent holds the mount point where the root
	// has none and is read-only), and commands start there with HOME,
	// USER and PWD to match. Empty: /workspace, USER=sandbox.
	Home string `json:"home,omitempty"`
	// WorkDir, when set, is the directory of a command that names none
	// (the image's working directory). Empty: the home.
	WorkDir string `json:"workdir,omitempty"`
	// OpenFiles is RLIMIT_NOFILE for commands; Pids is their RLIMIT_NPROC
	// (each sandbox has its own uids, so it counts only this sandbox).
	OpenFiles int `json:"open_files"`
	Pids      int `json:"pids"`
	// FileSize is RLIMIT_FSIZE for commands.
	FileSize int64 `json:"file_size"`
	// Cgroup is where each exec gets its own group.
	Cgroup CgroupConfig `json:"cgroup"`
	// AgentTasks are descriptors of the "tasks" files of the agent's own
	// group (cgroup v1), open for writing: the agent moves each of its
	// threads there itself before it does anything else.
	AgentTasks []int `json:"agent_tasks,omitempty"`
	// Skip names layers the caller accepted running without.
	Skip []sandbox.Layer `json:"skip,omitempty"`
	// KeepExecCgroups leaves finished execs' groups for the host to read
	// and remove.
	KeepExecCgroups bool `json:"keep_exec_cgroups"`
	// Contained is set when the environment already isolates: a runtime
	// (gVisor, a container engine, a virtual machine) built the root, the
	// namespaces and the host's cgroups, and the agent builds only what
	// lives inside: the workload's own groups, its chroot, its identity and
	// confinement. Nil means native: the agent builds everything (Root,
	// Mounts, Cgroup...).
	Contained *ContainedConfig `json:"contained,omitempty"`
	// Egress, when set, makes the agent listen on the egress proxy port
	// and tunnel each connection to the host (see ServeEgress). Nil: no
	// network beyond loopback.
	Egress *EgressConfig `json:"egress,omitempty"`
	// Template says the sandbox is built ahead of its use (in a virtual
	// machine that is then saved as a snapshot, or a warm Pod): the agent
	// builds it with this config, writes one byte to ReadyFD and closes it
	// (in stdio mode, one byte to standard output), and waits on FDConfig
	// (standard input, framed as WriteConfig does) for a second Config,
	// the sandbox's own, whose host name, sizes of /workspace and /tmp,
	// environment, file size limit and egress it takes on before it
	// serves. What else differs is not taken on. False: this is the
	// sandbox's config.
	Template bool `json:"template,omitempty"`
	// ReadyFD, with Template, is a descriptor (a pipe's writing end) the
	// agent writes a byte to once it waits for the sandbox's config.
	ReadyFD int `json:"ready_fd,omitempty"`
	// GuestControl, in a virtual machine, is a descriptor (a unix socket)
	// to the guest's init: the agent sends it each resume's GuestRefresh
	// as a JSON line, and the init, which holds the capabilities to set
	// the clock, answers a line ("ok", or what failed). Zero: not a
	// machine's agent, which cannot suspend its session.
	GuestControl int `json:"guest_control,omitempty"`
	// WarmUp, with Template, are commands the agent runs once, as the
	// workload, before it waits: what they read from the root is then in
	// the page cache a snapshot keeps. A command that fails is ignored.
	// None by default.
	WarmUp [][]string `json:"warm_up,omitempty"`
	// Guest is set by the host of a virtual machine, whose init (the agent
	// started with GuestArg) consumes it: it sets up the guest for this
	// sandbox, fills in Root, Mounts and Cgroup with what it made, and
	// starts the agent proper with the rest (see GuestConfig). Nil
	// everywhere else.
	Guest *GuestConfig `json:"guest,omitempty"`
	// Listen, when set, makes the sandbox outlive its host: the agent
	// serves host sessions from a listening unix socket, one at a time (a
	// new one closes the one before), and the end of a session ends
	// nothing: commands run on, their output kept (ExecStart.OutputBuffer)
	// for the next session to attach to, until the host kills the
	// sandbox. Nil: the agent serves the one connection it was started
	// with, and kills every command and exits when it ends (a one-shot
	// run's sandbox dies with its run).
	Listen *ListenConfig `json:"listen,omitempty"`
	// Run, when set, is a one-shot run's command, sent with the config:
	// the agent starts it as soon as the sandbox is built, before it
	// serves, holding its output until the host attaches to it
	// (ExecAttach, by Run.ID). The host sends no exec request and waits
	// for no handshake before it runs (docs/decisions.md, 91). Nil: none.
	Run *ExecStart `json:"run,omitempty"`
	// RunSocket, when set, is the descriptor of an exec socket
	// (execsock.go) whose first frame, already written by the host, starts
	// a one-shot run's command: the agent serves it as soon as the sandbox
	// is built, before it serves the host's connection (native; Run is for
	// a transport that carries no descriptor). Zero: none.
	RunSocket int `json:"run_socket,omitempty"`
}

// ListenConfig is where the agent takes host sessions from.
type ListenConfig struct {
	// FD is a unix stream socket the host bound (native: at a root-only
	// path outside the sandbox) and passed as FDConn; the agent calls
	// listen on it as its first act (it is started with ListenArg), so
	// that the credentials a host reads from a session (SO_PEERCRED) are
	// the agent's own.
	FD int `json:"fd,omitempty"`
	// Path is where the agent binds and listens itself: a directory of
	// the host's bound into the sandbox (gVisor, with --host-uds=create),
	// denied to the workload.
	Path string `json:"path,omitempty"`
}

// ListenArg, as the agent's first argument, says that FDConn is a bound
// socket to listen on (ListenConfig.FD), not a connection.
const ListenArg = "--listen"

// ContainedCaps are the capabilities the agent is started with wherever a
// runtime isolates (Config.Contained: gVisor, a container engine, a Pod),
// as OCI spells them, and all that it keeps once the sandbox is built
// (docs/decisions.md, 7): finish the sandbox (unmount /sys, cgroups
// inside, the commands' chroot), start commands as the workload and
// signal them, and act on files as the workload's uid. Commands get none:
// the agent starts each from a thread that dropped the bounding set, as
// the workload's uid, with no_new_privs and its own seccomp filter. These
// are security-relevant: a test holds the agent to keeping exactly these.
var ContainedCaps = []string{
	"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP", "CAP_SYS_ADMIN",
	"CAP_SYS_CHROOT", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
}

// ContainedConfig is what the agent sets up inside an environment that
// already isolates (see Config.Contained).
type ContainedConfig struct {
	// Pids caps the workload's processes and threads with the pids
	// controller of the cgroup file system inside. (The host's cgroup may
	// hold the runtime's own processes too, so it is sized for them, not
	// for this.)
	Pids int `json:"pids"`
	// AgentMount is the mount point of the agent's binary (a file), which
	// the agent removes once it runs, so that no command sees it. Empty:
	// the binary stays where the runtime put it (the runtime hides it).
	AgentMount string `json:"agent_mount"`
	// AgentVolume is the mount point of a volume that holds the agent's
	// binary (a container engine's), which the agent moves into Home and
	// whose mount point it removes, so that no command sees it; relays are
	// started from there (Home/bin). Empty: none.
	AgentVolume string `json:"agent_volume,omitempty"`
	// OwnWorkspace makes the agent give /workspace to the workload (owner
	// UID:GID, mode 0755), where the runtime mounts it owned by root (a
	// Pod's emptyDir). False: as the runtime made it.
	OwnWorkspace bool `json:"own_workspace,omitempty"`
	// Unmount are mount points the runtime made that commands must not
	// see (a kubelet's /dev/termination-log): the agent unmounts and
	// removes them. Empty: none.
	Unmount []string `json:"unmount,omitempty"`
	// Home is a directory the agent makes, that only root may enter, for
	// what it keeps: the moved AgentVolume, and where the driver says so,
	// its session socket and the commands' chroot. Empty: none.
	Home string `json:"home,omitempty"`
	// MaskProc says the sandbox's /proc is the host kernel's (a container
	// engine's runc): the agent masks what tells the host apart, as the
	// native agent does, and gives the sandbox a boot id of its own.
	MaskProc bool `json:"mask_proc,omitempty"`
	// ChrootDir is an empty directory for the commands' chroot (see
	// chrootTarget in agentd), which the agent makes. Empty means the
	// directory of AgentMount, or no chroot.
	ChrootDir string `json:"chroot_dir,omitempty"`
	// Listen, when set, is a unix socket the agent listens on for later
	// host sessions, reached with RelayArg: a host that reattaches after
	// its first session (standard input and output) ended. The sandbox
	// then outlives its sessions as with Config.Listen: it ends when its
	// runtime stops it, never because a session ended; a new session
	// closes the one before; and an exec whose session ended runs on to
	// its own end (or its timeout), its output kept for the next session.
	// Only uid 0 inside may connect. Empty: the first session is the only
	// one, and its end ends the sandbox.
	Listen string `json:"listen,omitempty"`
	// ReadOnlyRoot makes the agent remount the root read-only once it has
	// removed its mount points: for a runtime that gives it a writable
	// root, because its own read-only root keeps the image's names (gVisor
	// under a container engine).
	ReadOnlyRoot bool `json:"read_only_root,omitempty"`
	// MachineID, when set, is the sandbox's /etc/machine-id (32
	// lower-case hex digits): the agent binds files of its own over the
	// root's /etc/machine-id, /etc/hostname and /etc/hosts (which must
	// exist), and can give them a new identity after a restore (a live
	// fork's clone: see Identity). Empty: the root's files stay.
	MachineID string `json:"machine_id,omitempty"`
	// CgroupV1 lets the agent use the runtime's cgroup v1 hierarchies, in
	// a cgroup namespace of the container's own, when there is no cgroup
	// v2 inside: the workload's group and one per exec below the
	// container's own group, as the native driver has them on the host.
	CgroupV1 bool `json:"cgroup_v1,omitempty"`
	// SharedUIDs says the workload's uid is the same host uid in every
	// sandbox of this runtime (a container engine without user
	// namespaces): without cgroups inside, the agent does not fall back to
	// RLIMIT_NPROC, which would count every sandbox's processes together;
	// the runtime's own pids limit holds instead.
	SharedUIDs bool `json:"shared_uids,omitempty"`
	// ImageEnv says the runtime started the agent with the image's
	// environment and in its working directory (a Pod's container, whose
	// driver never reads the image): commands get that environment, less
	// what the runtime adds (HOSTNAME, HOME, KUBERNETES_*), under Env,
	// and that directory unless WorkDir names one ("/" is none).
	ImageEnv bool `json:"image_env,omitempty"`
}

// MountConfig attaches one detached mount.
type MountConfig struct {
	FD       int    `json:"fd"`
	Target   string `json:"target"`
	Dir      bool   `json:"dir"`
	Writable bool   `json:"writable"`
}

// CgroupConfig names the workload group's directory in each hierarchy.
type CgroupConfig struct {
	V2 bool `json:"v2"`
	// FDs are directory descriptors; Controllers[i] lists what FDs[i] holds.
	FDs         []int      `json:"fds,omitempty"`
	Controllers [][]string `json:"controllers,omitempty"`
}

// SuspendSignal, sent to the agent of a sandbox whose sessions come from a
// path (ListenConfig.Path), has it close its listener and its session
// before the sandbox is checkpointed; ResumeSignal has it listen again.
// Commands run on meanwhile.
const (
	SuspendSignal = syscall.SIGUSR1
	ResumeSignal  = syscall.SIGUSR2
)
