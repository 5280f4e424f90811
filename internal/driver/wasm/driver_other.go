//go:build !linux

package wasm

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver is the Wasm driver, which needs Linux (openat2) here.
type Driver struct{}

var _ sandbox.Driver = (*Driver)(nil)

// New returns a driver whose Probe says that Linux is needed.
func New(Options) (*Driver, error) { return &Driver{}, nil }

// Name is "wasm".
func (d *Driver) Name() string { return "wasm" }

// Probe says that the driver needs Linux.
func (d *Driver) Probe(context.Context) error {
	return &sandbox.UnsupportedError{What: "wasm", Why: "the wasm driver needs Linux (openat2 confines its files)", Fix: "run airlock on Linux 5.6 or later"}
}

// Capabilities are those of the Linux driver.
func (d *Driver) Capabilities() sandbox.Capabilities { return capabilities }

// Create fails as Probe does.
func (d *Driver) Create(ctx context.Context, _ sandbox.Spec) (sandbox.Instance, error) {
	return nil, d.Probe(ctx)
}

// Python fails as Probe does.
func (d *Driver) Python(ctx context.Context) error { return d.Probe(ctx) }
