//go:build !linux

package microvm

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver is the microvm driver; off Linux it can run nothing.
type Driver struct{ agentdriver.Unavailable }

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, agentdriver.Unavailable{Driver: "microvm", Needs: "Linux"}.Err()
}

// Prepare fails off Linux.
func (d *Driver) Prepare(context.Context, []sandbox.Limits, func(string, ...any)) error {
	return d.Err()
}
