// Package confine holds the per-thread confinement primitives the in-sandbox
// agent applies just before it starts a workload command: no_new_privs, an
// empty capability bounding set, a Landlock domain and a seccomp-bpf
// allowlist.
//
// Every primitive acts on the calling OS thread only, never on the whole
// process (no TSYNC, no all-threads syscalls), so the agent's other threads
// stay unconfined. The caller must therefore run on a goroutine that called
// runtime.LockOSThread and never unlocks it, so that the Go runtime retires
// the thread once the goroutine ends instead of reusing it for other work.
// A child forked from that thread (syscall.ForkExec) inherits everything.
// The runtime never exits the main thread: should the locked goroutine have
// started there, the thread is parked for good instead, still confined. A
// program that confines threads should therefore lock its main goroutine to
// the main thread (runtime.LockOSThread in main or init).
//
// The order matters:
//
//	runtime.LockOSThread() // never unlocked
//	confine.SetNoNewPrivs() // first: Landlock and seccomp need it
//	confine.DropBoundingSet()
//	confine.Landlock{...}.RestrictThread()
//	filter.InstallThread() // needs no_new_privs
//	syscall.ForkExec(...)
//
// The package uses only golang.org/x/sys/unix and golang.org/x/net/bpf (no
// cgo, no libseccomp), so the static agent binary stays small.
package confine
