// Package microvm runs sandboxes in virtual machines: one QEMU process
// (-M microvm) per sandbox, with its own Linux kernel. Code that breaks out
// of the guest's namespaces still has to break the guest's kernel and then
// the virtual machine.
//
// The guest is Debian's cloud kernel (fetched and cached by version, never
// installed on the host), an initramfs airlock builds whose init is the
// agent, and a read-only root disk airlock builds from the host's packages
// (or from a template's root directory), cached by content and shared by
// every machine. The guest has no network device at all: the agent talks to
// the host over virtio-serial, with the same protocol as every other
// driver, and network mode egress uses the agent's listener inside the
// guest and the same tunnel as native. Inside, the agent runs every
// command as it does on a host: uid 1000, no capabilities, no_new_privs,
// seccomp, Landlock, a cgroup each (the guest's own cgroup v2, which also
// holds the memory and process limits).
//
// A sandbox starts from a snapshot: once per machine shape (kernel,
// initramfs, root, RAM, vCPUs, accelerator) a machine boots to the point
// where its agent waits for a sandbox's config, and QEMU saves it; each
// sandbox restores it (-incoming), its RAM a private copy-on-write view of
// the snapshot's, which every sandbox shares. The host then hands the
// guest a fresh identity (a random seed credited to its entropy pool, a
// machine id, a host name, the clock) before the first command. A cold
// boot is the fallback.
//
// On the host, QEMU runs as a uid of its own, without capabilities, in the
// sandbox's cgroup (its memory ceiling, CPU quota and process limit), under
// its own seccomp sandbox (-sandbox on). KVM is used where /dev/kvm really
// runs a guest; elsewhere QEMU emulates the CPU (TCG), an order of
// magnitude slower.
package microvm

import (
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Options configure the driver. The zero value is ready to use.
type Options struct {
	// QEMU is the qemu-system-x86_64 binary. Empty means the one on PATH.
	QEMU string
	// Accel is "kvm" or "tcg". Empty means KVM where /dev/kvm really runs
	// a guest (see hostcap's kvm probe), else TCG.
	Accel string
	// Cold makes every sandbox boot its machine instead of restoring a
	// snapshot. False: snapshots, with a cold boot where one cannot be
	// made.
	Cold bool
	// Packages are the Debian packages (and what they depend on) whose
	// files make the default root; a name ending in "?" is taken where it
	// is installed and left out elsewhere. Nil means DefaultPackages.
	Packages []string
	// KernelArgs are added to the guest kernel's command line. None by
	// default.
	KernelArgs []string
	// BootTimeout bounds one boot of a machine to its agent's readiness;
	// BootAttempts is how many boots are tried before a create fails. Zero
	// means 60 s under TCG (10 s with KVM), and 3 attempts.
	BootTimeout  time.Duration
	BootAttempts int
	// CacheDir holds the kernels, initramfs and root images and snapshots
	// below microvm/. Empty means $AIRLOCK_CACHE, else /var/cache/airlock.
	CacheDir string
	// StateDir holds the locks shared with the other drivers. Empty means
	// /run/airlock.
	StateDir string
	// CgroupParent is the group below each hierarchy's root that holds the
	// sandboxes. Empty means "airlock".
	CgroupParent string
	// Agent is the agent's binary. Empty means the one this airlock
	// ships.
	Agent string
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// Egress is the proxy that sandboxes in network mode egress reach. Nil
	// means one of the driver's own, with the default limits and no
	// secrets.
	Egress *egress.Proxy
}

// shared are the options every agent driver takes (agentdriver.Recipe).
func (o Options) shared() agentdriver.Shared {
	return agentdriver.Shared{Logger: o.Logger, StateDir: o.StateDir, CgroupParent: o.CgroupParent, Egress: o.Egress, Agent: o.Agent}
}
