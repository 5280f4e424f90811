//go:build !linux

package confine

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Landlock is a file-system ruleset; see the Linux documentation.
type Landlock struct {
	ReadExec  []string
	ReadWrite []string
	Scoped    bool
}

// LandlockABI is 0: Landlock needs Linux.
func LandlockABI() int { return 0 }

// RestrictThread needs Linux.
func (l Landlock) RestrictThread() (int, error) {
	return 0, fmt.Errorf("landlock: %w", sandbox.ErrUnsupported)
}
