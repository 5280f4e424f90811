package agentd

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ownNamespaces moves the agent into a network namespace of its own, with
// only loopback, up (which needs CAP_NET_ADMIN, dropped with the rest once
// the sandbox is built), and a cgroup namespace of its own, and runs it
// again there with the arguments after agent.OwnNamespacesArg. A
// namespace is a thread's until it executes: the main thread (which
// cmd/airlock-agent keeps locked) unshares them and then executes the
// agent again, which leaves the new process (PID 1 still, its standard
// streams as they were) wholly inside them.
func ownNamespaces() int {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		fmt.Fprintf(os.Stderr, "airlock-agent: a network namespace of its own: %v\n", err)
		return 1
	}
	// gVisor's kernel answers the interface ioctls with ENOTTY in a new
	// namespace, whose loopback it brings up itself.
	if err := loopbackUp(); err != nil && !errors.Is(err, unix.ENOTTY) {
		fmt.Fprintf(os.Stderr, "airlock-agent: bring up loopback: %v\n", err)
		return 1
	}
	// gVisor has no cgroup namespaces; its cgroup file system is its own.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil && !errors.Is(err, unix.EINVAL) {
		fmt.Fprintf(os.Stderr, "airlock-agent: a cgroup namespace of its own: %v\n", err)
		return 1
	}
	// Named by its base name whatever path started it (a Pod's command
	// is the full path), as the agent is everywhere.
	argv := append([]string{filepath.Base(os.Args[0])}, os.Args[2:]...)
	err := unix.Exec("/proc/self/exe", argv, os.Environ())
	fmt.Fprintf(os.Stderr, "airlock-agent: run again in its namespaces: %v\n", err)
	return 1
}

// endOnTerm makes SIGTERM end the agent at once (exit status 143, as a
// shell reports a SIGTERM).
func endOnTerm() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGTERM)
	go func() {
		<-ch
		os.Exit(128 + int(unix.SIGTERM))
	}()
}
