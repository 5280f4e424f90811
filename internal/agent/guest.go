package agent

// The agent as the init of a virtual machine (the microvm driver).
//
// The kernel starts the agent from the initramfs airlock built as PID 1
// with GuestArg. It boots the guest as GuestBoot says (modules, the root
// disk, the guest's own cgroup v2), writes GuestReady on the virtio-serial
// port and waits there for the Config, framed as WriteConfig frames it. A
// virtual machine saved at that moment is the snapshot every sandbox
// starts from. Once the Config arrives the agent gives the guest the
// sandbox's identity (GuestConfig) and starts the agent proper, in new
// namespaces inside the guest, exactly as the native driver starts it on a
// host: the rest of the stream is its HTTP/2.

// GuestArg, as the agent's first argument, makes it the init of a virtual
// machine.
const GuestArg = "--guest"

// GuestExitArg, instead of GuestArg, makes the guest's init restart the
// machine as soon as it runs: a bare boot of the same kernel and initramfs
// to init, for the benchmark.
const GuestExitArg = "--guest-exit"

// GuestWarmEnv, set to 1 in the environment the kernel gives init (the
// kernel command line's "airlock_warm=1"), says the machine is booted to
// be saved as a snapshot: the sandbox built ahead runs warm-up commands
// (Config.WarmUp) first. A machine booted for one sandbox skips them.
const GuestWarmEnv = "airlock_warm"

// GuestBootFile is where GuestBoot is, as JSON, in the initramfs.
const GuestBootFile = "/boot.json"

// GuestModulesDir holds the kernel modules in the initramfs.
const GuestModulesDir = "/modules"

// GuestReady is the line the guest writes on its port once it has booted
// and waits for its Config. The host reads it and nothing before it.
const GuestReady = "airlock-guest-ready v1\n"

// GuestBoot says how the guest boots: it is fixed for an initramfs, and
// what a snapshot was booted with.
type GuestBoot struct {
	// Modules are the kernel modules' files in GuestModulesDir, in the
	// order they are loaded (each after those it depends on).
	Modules []string `json:"modules"`
	// Port is the name of the virtio-serial port the host talks on.
	Port string `json:"port"`
	// RootDevice is the block device of the read-only root file system
	// ("/dev/vda"), and RootFS its type ("ext4").
	RootDevice string `json:"root_device"`
	RootFS     string `json:"root_fs"`
}

// GuestConfig is what a guest sets up for a sandbox beyond Config: what
// makes a virtual machine restored from a snapshot this sandbox and no
// other, and the workload's limits in the guest's cgroups.
type GuestConfig struct {
	// Seed is mixed into the guest kernel's entropy pool, and credited,
	// before anything else runs: virtual machines restored from one
	// snapshot must not share random numbers. At least 32 bytes.
	Seed []byte `json:"seed"`
	// MachineID is the sandbox's /etc/machine-id: 32 lower-case hex digits.
	MachineID string `json:"machine_id"`
	// TimeUnixNano is the host's wall clock when it sent the Config; the
	// guest's clock is set to it (a snapshot's clock is the moment it was
	// saved).
	TimeUnixNano int64 `json:"time_unix_nano"`
	// MemoryBytes caps the memory of all commands together (the guest's
	// workload cgroup, no swap). Zero: only the guest's RAM.
	MemoryBytes int64 `json:"memory_bytes"`
	// Pids caps the processes and threads of all commands (the guest's
	// workload cgroup). Zero: no limit there.
	Pids int `json:"pids"`
}
