//go:build !linux

package sandboxtest

import (
	"errors"
	"fmt"
)

// exchange swaps the files at a and b atomically; only Linux can.
func exchange(a, b string) error {
	return fmt.Errorf("swap %s and %s: %w", a, b, errors.ErrUnsupported)
}
