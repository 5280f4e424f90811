package agent

// Each sandbox's share of the kernel's inotify pools. The kernel charges an
// inotify instance or watch to the user that made it in every user namespace
// from the caller's up to the host's, and at the host's level to the user
// that owns the sandbox's user namespace: the native driver makes it owned
// by the sandbox's own host uid, so that its pool at the host's level is
// its own and not root's (which kubelet, containerd and systemd draw on).
// The agent sets these limits in the sandbox's user namespace, so that
// what one sandbox holds stays small wherever it runs (docs/decisions.md,
// 44).
const (
	// InotifyInstances is user.max_inotify_instances inside a sandbox:
	// inotify_init1 fails with EMFILE past it.
	InotifyInstances = 32
	// InotifyWatches is user.max_inotify_watches inside a sandbox:
	// inotify_add_watch fails with ENOSPC past it.
	InotifyWatches = 8192
)
