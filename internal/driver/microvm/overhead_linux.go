package microvm

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// hostMemory is the memory ceiling of a machine's host cgroup
// (makeCgroup): the guest's RAM and QEMU's own, more when it emulates.
func hostMemory(guestMiB int, accel string) int64 {
	o := qemuOverheadMiB
	if accel == "tcg" {
		o = qemuOverheadTCGMiB
	}
	return int64(guestMiB+o) << 20
}

// Overhead is what a sandbox of spec costs beyond its limits
// (sandbox.Overheader), as its host cgroup allows it: what the cgroup
// lets the machine hold (the guest's RAM, with its kernel, the agent and
// rounding; QEMU's own) beyond PinnableBytes, and QEMU's threads.
// Everything the machine holds, its tmpfs mounts too, is QEMU's memory,
// in that cgroup. Admission counts it.
func (d *Driver) Overhead(spec sandbox.Spec) sandbox.Overhead {
	l := spec.Limits.WithDefaults()
	host := hostMemory(guestMemoryMiB(l.MemoryBytes), d.accelerator())
	return sandbox.Overhead{MemoryBytes: max(host-l.PinnableBytes(), 0), Tasks: qemuPids}
}
