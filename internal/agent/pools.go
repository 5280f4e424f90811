package agent

// Each sandbox's share of the kernel's inotify pools. The kernel charges an
// inotify instance or watch to the user that made it in every user namespace
// from the caller's up to the host's, and at the host's level to the user
// that owns the sandbox's user namespace: root, for the native driver,
// whose pool (user.max_inotify_instances, 128 by default) kubelet,
// containerd, systemd and every other sandbox draw from. The agent sets
// these limits in the sandbox's own user namespace, so one sandbox can take
// no more than its share; the native driver raises the host's own limits
// so that every sandbox the host can hold fits beside what the host had
// (docs/decisions.md, 44).
const (
	// InotifyInstances is user.max_inotify_instances inside a sandbox:
	// inotify_init1 fails with EMFILE past it.
	InotifyInstances = 32
	// InotifyWatches is user.max_inotify_watches inside a sandbox:
	// inotify_add_watch fails with ENOSPC past it.
	InotifyWatches = 8192
)
