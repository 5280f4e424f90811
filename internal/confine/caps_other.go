//go:build !linux

package confine

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// SetNoNewPrivs needs Linux.
func SetNoNewPrivs() error { return fmt.Errorf("set no_new_privs: %w", sandbox.ErrUnsupported) }

// DropBoundingSet needs Linux.
func DropBoundingSet() error {
	return fmt.Errorf("drop capability bounding set: %w", sandbox.ErrUnsupported)
}
