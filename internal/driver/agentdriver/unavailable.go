package agentdriver

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Unavailable is a driver on a system it cannot run on, such as the native
// and gVisor drivers off Linux, where their packages still build (so that
// `go build ./...` works on a Mac): Probe and Create fail with
// sandbox.ErrUnsupported, saying what the driver needs.
type Unavailable struct {
	// Driver is the driver's name ("native").
	Driver string
	// Needs is what it needs ("Linux").
	Needs string
}

var (
	_ sandbox.Driver    = Unavailable{}
	_ sandbox.Sweeper   = Unavailable{}
	_ sandbox.Recoverer = Unavailable{}
)

// Err is the error of every call that would need the driver to run.
func (u Unavailable) Err() error {
	return fmt.Errorf("%s driver: %w (it needs %s)", u.Driver, sandbox.ErrUnsupported, u.Needs)
}

// Name is the driver's name.
func (u Unavailable) Name() string { return u.Driver }

// Probe fails with Err.
func (u Unavailable) Probe(context.Context) error { return u.Err() }

// Create fails with Err.
func (u Unavailable) Create(context.Context, sandbox.Spec) (sandbox.Instance, error) {
	return nil, u.Err()
}

// Recover fails with Err.
func (u Unavailable) Recover(context.Context, string, []byte) (sandbox.Instance, error) {
	return nil, u.Err()
}

// Sweep has nothing to sweep.
func (Unavailable) Sweep(context.Context) error { return nil }

// Capabilities: the driver runs nothing here.
func (Unavailable) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }
