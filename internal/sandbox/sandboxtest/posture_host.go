package sandboxtest

import (
	"os"
	"strings"
	"testing"
)

// hostIdentifiers are /proc files that tell this host apart from others;
// a sandbox must not see the host's content of any of them (an empty or
// absent file, or its own value, will do). docs/decisions.md lists what a
// sandbox sees of the host on purpose (kernel version, CPU model, memory
// size, load, boot time) and why.
var hostIdentifiers = []string{
	"/proc/sys/kernel/random/boot_id", "/proc/cmdline", "/proc/partitions", "/proc/diskstats",
	"/proc/swaps", "/proc/iomem", "/proc/ioports", "/proc/kallsyms", "/proc/consoles",
	"/proc/locks", "/proc/modules", "/proc/devices", "/proc/misc", "/proc/buddyinfo",
	"/proc/zoneinfo", "/proc/vmstat",
}

// testHostIdentity: a command cannot read what identifies this host: its
// boot id (each sandbox has its own), its kernel command line, its disks,
// memory layout, kernel symbols, consoles, and the host's file locks.
func testHostIdentity(t *testing.T, e *env) {
	for _, f := range hostIdentifiers {
		host, err := os.ReadFile(f)
		if err != nil || len(strings.TrimSpace(string(host))) == 0 {
			continue // nothing of the host to leak here
		}
		o := e.run(t, execArgv("cat", f))
		inside := strings.TrimSpace(o.stdout)
		if inside == "" {
			continue
		}
		if inside == strings.TrimSpace(string(host)) {
			t.Errorf("%s inside the sandbox is the host's own (%d bytes)", f, len(host))
		}
		if f == "/proc/sys/kernel/random/boot_id" && len(inside) != 36 {
			t.Errorf("the sandbox's boot id %q is not a UUID", inside)
		}
	}
	// The boot id is the sandbox's own, not one shared by all sandboxes:
	// another sandbox of the same driver has another.
	other := e.create(t, e.spec)
	var a, b syncBuffer
	e.runIn(t, e.sb, execArgv("cat", "/proc/sys/kernel/random/boot_id"), &a)
	e.runIn(t, other, execArgv("cat", "/proc/sys/kernel/random/boot_id"), &b)
	if a.String() != "" && a.String() == b.String() {
		t.Errorf("two sandboxes share the boot id %q", a.String())
	}
}
