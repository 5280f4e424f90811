//go:build !no_docker

package main

import (
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/driver/docker"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	cli.RegisterDriver("docker", func(o cli.DriverOptions) (sandbox.Driver, error) {
		// A daemon's sandboxes outlive it; a one-shot run's die with it.
		d, err := docker.New(docker.Options{Logger: o.Logger, Egress: o.Egress, Instance: o.Instance, Persistent: o.Instance != "", Progress: o.Progress})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
