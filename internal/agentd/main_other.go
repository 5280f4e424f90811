//go:build !linux

package agentd

import (
	"fmt"
	"os"
)

// Main reports that the agent needs Linux.
func Main() int {
	fmt.Fprintln(os.Stderr, "airlock-agent: the agent runs only on Linux")
	return 1
}
