//go:build !linux

package gvisor

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver is the gVisor driver; off Linux it can run nothing.
type Driver struct{}

var _ sandbox.Driver = (*Driver)(nil)

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, fmt.Errorf("gvisor driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Name() string { return "gvisor" }

func (*Driver) Probe(context.Context) error {
	return fmt.Errorf("gvisor driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Create(context.Context, sandbox.Spec) (sandbox.Instance, error) {
	return nil, fmt.Errorf("gvisor driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

// Sweep does nothing off Linux.
func (*Driver) Sweep(context.Context) error { return nil }

// Capabilities: off Linux the driver runs nothing.
func (*Driver) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
