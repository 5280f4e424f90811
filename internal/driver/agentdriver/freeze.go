package agentdriver

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// HostFreezer is a Host that can stop the sandbox's commands where they
// are (a cgroup freezer) and let them go on: its driver's pause keeps the
// memory in the host (sandbox.Capabilities.MemoryKeptInHost).
type HostFreezer interface {
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context) error
}

var _ sandbox.Freezer = (*Instance)(nil)

// Freeze stops every command of the sandbox where it is, its memory kept;
// the agent answers on. A host that cannot fails with ErrUnsupported.
func (in *Instance) Freeze(ctx context.Context) error {
	f, ok := in.host.(HostFreezer)
	if !ok {
		return fmt.Errorf("freeze sandbox %s: %w", in.spec.ID, sandbox.ErrUnsupported)
	}
	if err := in.usable(); err != nil {
		return err
	}
	return f.Freeze(ctx)
}

// Thaw lets the commands of a frozen sandbox go on.
func (in *Instance) Thaw(ctx context.Context) error {
	f, ok := in.host.(HostFreezer)
	if !ok {
		return fmt.Errorf("thaw sandbox %s: %w", in.spec.ID, sandbox.ErrUnsupported)
	}
	return f.Thaw(ctx)
}
