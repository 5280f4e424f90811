package sandbox

// What a sandbox must not see of its host: one list, which every driver
// that runs the agent applies (the agent masks it from inside, as PID 1 of
// the sandbox, wherever its /proc is the host kernel's: the native driver,
// a container engine's runc), and which the conformance suite reads back
// on every driver (posture/host_identity). docs/decisions.md (19, 44) lists
// what a sandbox sees of its host on purpose, and why.

// MaskedProc are the names below /proc that a sandbox sees empty: what runc
// masks, and what would tell this host apart from others: its kernel's
// command line and build configuration, its disks, memory layout, kernel
// symbols, drivers and consoles, and every process's file locks on the
// host.
var MaskedProc = []string{
	"acpi", "asound", "interrupts", "kcore", "keys", "latency_stats", "sched_debug",
	"scsi", "timer_list", "timer_stats",
	"buddyinfo", "cmdline", "config.gz", "consoles", "devices", "diskstats", "dma", "iomem", "ioports",
	"kallsyms", "locks", "misc", "modules", "pagetypeinfo", "partitions", "softirqs",
	"swaps", "vmstat", "zoneinfo",
}

// BootIDFile is the host's boot id, which names the host and its boot:
// every sandbox sees a random one of its own there.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// EngineEtc are the files of /etc that a container engine or a kubelet
// binds from its own data directory (the host's resolvers, the
// container's addresses) and that a sandbox sees with content of its own
// instead, as the native driver writes them: the agent replaces the
// engine's mounts, whose source paths also name the engine's data root in
// /proc/self/mountinfo.
var EngineEtc = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"}
