// Command airlock-agent is airlock's in-sandbox agent: PID 1 of every
// sandbox that runs a Linux userland. The host starts it; it is not meant
// to be run by hand. See package internal/agentd.
package main

import (
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/agentd"
)

// The main goroutine keeps the main thread, so that no goroutine that
// confines its thread for a command (and ends locked) ever lands on the one
// thread Go cannot let exit.
func init() { runtime.LockOSThread() }

func main() { os.Exit(agentd.Main()) }
