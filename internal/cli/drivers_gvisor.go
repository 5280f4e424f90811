//go:build !no_gvisor

package main

import (
	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	registerDriver("gvisor", func(o driverOptions) (sandbox.Driver, error) {
		d, err := gvisor.New(gvisor.Options{Logger: o.logger, Egress: o.egress, Persistent: o.instance != ""})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
