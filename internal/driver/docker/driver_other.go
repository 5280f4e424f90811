//go:build !linux

package docker

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver is the Docker driver; off Linux it can run nothing (the agent is
// a Linux program, and so are the host's cgroup checks).
type Driver struct{}

var _ sandbox.Driver = (*Driver)(nil)

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, fmt.Errorf("docker driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Name() string { return "docker" }

func (*Driver) Probe(context.Context) error {
	return fmt.Errorf("docker driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

func (*Driver) Create(context.Context, sandbox.Spec) (sandbox.Instance, error) {
	return nil, fmt.Errorf("docker driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

// Recover fails off Linux.
func (*Driver) Recover(context.Context, string, []byte) (sandbox.Instance, error) {
	return nil, fmt.Errorf("docker driver: %w (it needs Linux)", sandbox.ErrUnsupported)
}

// Sweep does nothing off Linux.
func (*Driver) Sweep(context.Context) error { return nil }

// Capabilities: off Linux the driver runs nothing.
func (*Driver) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
