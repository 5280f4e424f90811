package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The one driver table: every command that makes sandboxes (run, serve,
// reap, mcp, doctor, bench) finds its drivers here. Each driver registers
// itself from a file of its own (drivers_native.go…), which a build tag
// can leave out, so a new driver is added in one place.

// defaultDriver is the driver used when none is named.
const defaultDriver = "native"

// driverOptions are what every driver is made with.
type driverOptions struct {
	// logger receives the driver's logs; nil discards them.
	logger *slog.Logger
	// egress is the proxy sandboxes in network mode egress reach; nil
	// means the driver's own (the one-shot CLI).
	egress *egress.Proxy
	// instance names the airlock process that owns what a driver makes
	// where it outlives the process (docker's label airlock.daemon); empty
	// means the one-shot CLI's. A daemon's drivers make sandboxes that
	// outlive it (Persistent), for it to reattach to after a restart;
	// otherwise a sandbox dies with its process (run, mcp).
	instance string
	// kubeconfig is the kubernetes driver's kubeconfig file; empty means
	// $KUBECONFIG, the in-cluster config, or ~/.kube/config.
	kubeconfig string
}

// daemonInstance is the instance of the daemon whose registry is in
// stateDir on this host.
func daemonInstance(stateDir string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return "serve@" + host + ":" + stateDir
}

// driverEntry is one driver of the table.
type driverEntry struct {
	name string
	new  func(driverOptions) (sandbox.Driver, error)
}

// driverTable lists the drivers this build has, in the order doctor shows
// them.
var driverTable []driverEntry

// registerDriver adds a driver to the table; drivers_*.go call it from init.
func registerDriver(name string, new func(driverOptions) (sandbox.Driver, error)) {
	driverTable = append(driverTable, driverEntry{name: name, new: new})
}

// commandTable lists airlock's commands: each file of a command (run.go,
// serve.go…) and of a driver with a setup of its own registers its own,
// so that a build which leaves a file out (the front, main.go) leaves out
// its command.
var commandTable []func() *cobra.Command

// registerCommand adds a command; the file that defines it calls it from
// init.
func registerCommand(newCmd func() *cobra.Command) {
	commandTable = append(commandTable, newCmd)
}

// driverNames lists the drivers this build has.
func driverNames() []string {
	var names []string
	for _, e := range driverTable {
		names = append(names, e.name)
	}
	return names
}

// haveDriver says whether this build has the driver called name.
func haveDriver(name string) bool {
	for _, e := range driverTable {
		if e.name == name {
			return true
		}
	}
	return false
}

// newDriver makes the driver called name.
func newDriver(name string, o driverOptions) (sandbox.Driver, error) {
	for _, e := range driverTable {
		if e.name == name {
			return e.new(o)
		}
	}
	return nil, fmt.Errorf("driver %q is not available in this build: %w; use one of: %s", name, sandbox.ErrUnsupported, strings.Join(driverNames(), ", "))
}

// availableDrivers makes the drivers a daemon offers to its templates:
// every driver of the table that can run here. The default driver is
// always offered, so that a create on a host that cannot run it says why;
// the others are left out, with the reason logged (a template that names
// one fails when the daemon starts). None sweeps here: the supervisor's
// Recover (or Reap) sweeps once the sandboxes of a previous daemon are
// reattached, so that a sandbox whose lock only its daemon held (a Docker
// container's) is not taken for a leftover.
func availableDrivers(ctx context.Context, o driverOptions) (map[string]sandbox.Driver, error) {
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	drivers := map[string]sandbox.Driver{}
	for _, e := range driverTable {
		d, err := e.new(o)
		if err == nil && e.name != defaultDriver {
			err = d.Probe(ctx)
		}
		if err != nil {
			if e.name == defaultDriver {
				return nil, err
			}
			log.Info("driver not available", "driver", e.name, "err", err)
			continue
		}
		drivers[e.name] = d
	}
	return drivers, nil
}
