//go:build !linux

package forker

import (
	"fmt"
	"os"
)

// Serve is the forker's main: only on Linux.
func Serve() int {
	fmt.Fprintln(os.Stderr, "airlock-agent: the forker runs only on Linux")
	return 1
}
