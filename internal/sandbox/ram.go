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
