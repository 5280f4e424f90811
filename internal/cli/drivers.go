package cli

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

// DriverOptions are what every driver is made with.
type DriverOptions struct {
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// Egress is the proxy sandboxes in network mode egress reach; nil
	// means the driver's own (the one-shot CLI).
	Egress *egress.Proxy
	// Instance names the airlock process that owns what a driver makes
	// where it outlives the process (docker's label airlock.daemon); empty
	// means the one-shot CLI's. A daemon's drivers make sandboxes that
	// outlive it (Persistent), for it to reattach to after a restart;
	// otherwise a sandbox dies with its process (run, mcp).
	Instance string
	// Kubeconfig is the kubernetes driver's kubeconfig file; empty means
	// $KUBECONFIG, the in-cluster config, or ~/.kube/config.
	Kubeconfig string
}

// DaemonInstance is the instance of the daemon whose registry is in
// stateDir on this host.
func DaemonInstance(stateDir string) string {
	host, _ := os.Hostname()
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	return "serve@" + host + ":" + stateDir
}

// driverEntry is one driver of the table.
type driverEntry struct {
	Name string
	New  func(DriverOptions) (sandbox.Driver, error)
}

// DriverTable lists the drivers this build has, in the order doctor shows
// them.
var DriverTable []driverEntry

// RegisterDriver adds a driver to the table; drivers_*.go call it from init.
func RegisterDriver(name string, new func(DriverOptions) (sandbox.Driver, error)) {
	DriverTable = append(DriverTable, driverEntry{Name: name, New: new})
}

// commandTable lists airlock's commands: each file of a command (run.go,
// serve.go…) and of a driver with a setup of its own registers its own,
// so that a build which leaves a file out (the front, main.go) leaves out
// its command.
var commandTable []func() *cobra.Command

// RegisterCommand adds a command; the file that defines it calls it from
// init.
func RegisterCommand(newCmd func() *cobra.Command) {
	commandTable = append(commandTable, newCmd)
}

// DriverNames lists the drivers this build has.
func DriverNames() []string {
	var names []string
	for _, e := range DriverTable {
		names = append(names, e.Name)
	}
	return names
}

// haveDriver says whether this build has the driver called name.
func haveDriver(name string) bool {
	for _, e := range DriverTable {
		if e.Name == name {
			return true
		}
	}
	return false
}

// NewDriver makes the driver called name.
func NewDriver(name string, o DriverOptions) (sandbox.Driver, error) {
	for _, e := range DriverTable {
		if e.Name == name {
			return e.New(o)
		}
	}
	return nil, fmt.Errorf("driver %q is not available in this build: %w; use one of: %s", name, sandbox.ErrUnsupported, strings.Join(DriverNames(), ", "))
}

// AvailableDrivers makes the drivers a daemon offers to its templates:
// every driver of the table that can run here. The default driver is
// always offered, so that a create on a host that cannot run it says why;
// the others are left out, with the reason logged (a template that names
// one fails when the daemon starts). None sweeps here: the supervisor's
// Recover (or Reap) sweeps once the sandboxes of a previous daemon are
// reattached, so that a sandbox whose lock only its daemon held (a Docker
// container's) is not taken for a leftover.
func AvailableDrivers(ctx context.Context, o DriverOptions) (map[string]sandbox.Driver, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	drivers := map[string]sandbox.Driver{}
	for _, e := range DriverTable {
		d, err := e.New(o)
		if err == nil && e.Name != defaultDriver {
			err = d.Probe(ctx)
		}
		if err != nil {
			if e.Name == defaultDriver {
				return nil, err
			}
			log.Info("driver not available", "driver", e.Name, "err", err)
			continue
		}
		drivers[e.Name] = d
	}
	return drivers, nil
}
