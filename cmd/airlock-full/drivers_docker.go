//go:build !no_docker && !front

package main

import (
	"github.com/airlock-sandbox/airlock/internal/driver/docker"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	registerDriver("docker", func(o driverOptions) (sandbox.Driver, error) {
		// A daemon's sandboxes outlive it; a one-shot run's die with it.
		d, err := docker.New(docker.Options{Logger: o.logger, Egress: o.egress, Instance: o.instance, Persistent: o.instance != ""})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
