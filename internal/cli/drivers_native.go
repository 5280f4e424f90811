//go:build !no_native

package main

import (
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	registerDriver("native", func(o driverOptions) (sandbox.Driver, error) {
		d, err := native.New(native.Options{Logger: o.logger, Egress: o.egress, Persistent: o.instance != ""})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
