//go:build !no_wasm

// This file is not called drivers_wasm.go: a _wasm suffix would build it
// only for GOARCH=wasm.

package main

import (
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/driver/wasm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	cli.RegisterDriver("wasm", func(o cli.DriverOptions) (sandbox.Driver, error) {
		d, err := wasm.New(wasm.Options{Logger: o.Logger})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
