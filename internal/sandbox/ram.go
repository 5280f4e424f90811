package sandbox

// PinnableBytes is how much of the host's RAM a sandbox with these limits
// can hold: its memory limit, plus its tmpfs mounts, whose pages stay in
// RAM whoever wrote them (the agent writes them for the file API, outside
// the workload's memory limit): /workspace (DiskBytes), /tmp (TmpBytes) and
// /dev/shm, which has the size of /tmp. Zero fields count as their
// defaults. Admission and the keys' memory quotas count this, not the
// memory limit alone.
func (l Limits) PinnableBytes() int64 {
	l = l.WithDefaults()
	return l.MemoryBytes + l.DiskBytes + l.TmpBytes + l.ShmBytes()
}

// ShmBytes is the size of /dev/shm: that of /tmp.
func (l Limits) ShmBytes() int64 { return l.WithDefaults().TmpBytes }

// Overhead is what one sandbox costs the host beyond its limits: what
// holds it (a user-space kernel, a virtual machine's monitor and guest
// kernel, an agent beside the workload). Each driver declares it in its
// own folder (overhead.go), from the same function that sizes what the
// driver sets on the host, so that the two never differ.
type Overhead struct {
	// MemoryBytes is the host memory the sandbox may hold beyond
	// PinnableBytes (its memory limit and tmpfs mounts).
	MemoryBytes int64 `json:"memory_bytes"`
	// Tasks are the host processes and threads the sandbox may hold
	// beyond its Pids limit.
	Tasks int64 `json:"tasks"`
	// Descriptors are the open files the process that drives the sandbox
	// (the daemon) holds for it while it rests, against that process's
	// RLIMIT_NOFILE. Zero: not counted.
	Descriptors int64 `json:"descriptors,omitempty"`
}

// HostDescriptors is what d declares a sandbox of spec holds open in the
// process that drives it (Overhead.Descriptors); 0 when d declares none.
func HostDescriptors(d Driver, spec Spec) int64 {
	if o, ok := d.(Overheader); ok {
		return o.Overhead(spec).Descriptors
	}
	return 0
}

// HostBytes is how much of the host's memory a sandbox of spec on d can
// hold: PinnableBytes, and d's overhead where d declares one
// (Overheader). Admission and the keys' memory quotas count this.
func HostBytes(d Driver, spec Spec) int64 {
	n := spec.Limits.PinnableBytes()
	if o, ok := d.(Overheader); ok {
		n += o.Overhead(spec).MemoryBytes
	}
	return n
}
