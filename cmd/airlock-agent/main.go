// Command airlock-agent is airlock's in-sandbox agent: PID 1 of every
// sandbox that runs a Linux userland. The host starts it; it is not meant
// to be run by hand. See package internal/agentd.
package main

import (
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/agentd"
	"github.com/airlock-sandbox/airlock/internal/forker"
)

func init() {
	// The main goroutine keeps the main thread, so that no goroutine that
	// confines its thread for a command (and ends locked) ever lands on
	// the one thread Go cannot let exit. It reaps the sandbox's processes
	// there (agentd's reaper).
	runtime.LockOSThread()
	// One P: the agent mostly waits in system calls, which hand their P
	// on, and every P it had once left an idle thread behind for good. A
	// host with thousands of sandboxes runs out of pids (kernel.pid_max)
	// on threads, not processes (docs/decisions.md).
	runtime.GOMAXPROCS(1)
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == forker.Arg {
		// The host's forker of agents (docs/decisions.md, 62).
		os.Exit(forker.Serve())
	}
	os.Exit(agentd.Main())
}
