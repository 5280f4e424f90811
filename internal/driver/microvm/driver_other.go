//go:build !linux

package microvm

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver is the microvm driver; off Linux it can run nothing.
type Driver struct{}

var _ sandbox.Driver = (*Driver)(nil)

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, fmt.Errorf("microvm driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Name() string { return "microvm" }

func (*Driver) Probe(context.Context) error {
	return fmt.Errorf("microvm driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Create(context.Context, sandbox.Spec) (sandbox.Instance, error) {
	return nil, fmt.Errorf("microvm driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

// Sweep does nothing off Linux.
func (*Driver) Sweep(context.Context) error { return nil }

// Capabilities: off Linux the driver runs nothing.
func (*Driver) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }

// Prepare fails off Linux.
func (*Driver) Prepare(context.Context, []sandbox.Limits, func(string, ...any)) error {
	return fmt.Errorf("microvm driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}
