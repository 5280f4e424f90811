// Command airlock-agent is airlock's in-sandbox agent: PID 1 of every
// sandbox that runs a Linux userland. The host starts it; it is not meant
// to be run by hand. See package internal/agent.
package main

import (
	"os"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

func main() { os.Exit(agent.Main()) }
