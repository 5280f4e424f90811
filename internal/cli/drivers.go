package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The one driver table: every command that makes sandboxes (run, serve,
// reap, mcp, doctor, bench) finds its drivers here. Each driver registers
// itself from a file of its own (drivers_native.go…), which a build tag
// can leave out, so a new driver is added in one place.

// DefaultDriver is the driver used when none is named.
const DefaultDriver = "native"

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
	// Progress receives the lines of a long step the user waits for (the
	// docker driver's pull); nil: none. The one-shot CLI's stderr.
	Progress io.Writer
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

// driverAbout is what the table says of a driver without making it: its
// part of --driver's help and of the README's row, and the `airlock run`
// flags it takes that not every driver does. Every build that can run the
// driver (the front too, which hands it off) has it.
type driverAbout struct {
	name string
	// help says what the driver is, in a few words.
	help string
	// flags are the flags of `airlock run` that only some drivers take
	// ("image", "runtime", "kubeconfig", "module"), each with what it
	// means for this driver. The image and runtime flags are the ones of
	// a driver with Capabilities.Images, module of one with Modules.
	flags map[string]string
}

// imageRootFlags are the flags of a driver that runs an image from its
// root unpacked on the host (Capabilities.ImageRoot).
var imageRootFlags = map[string]string{
	"image": "pulled into airlock's image cache (airlock image pull) and shown read-only as the root, with its Env and WorkingDir",
}

// driverAbouts lists the drivers this build knows of.
var driverAbouts []driverAbout

// aboutDriver adds what the table says of a driver; drivers_*.go call it
// from init.
func aboutDriver(a driverAbout) { driverAbouts = append(driverAbouts, a) }

// abouts lists what the table says of every driver this build knows of,
// the default driver first, then by name.
func abouts() []driverAbout {
	out := slices.Clone(driverAbouts)
	slices.SortFunc(out, func(a, b driverAbout) int {
		switch {
		case a.name == b.name:
			return 0
		case a.name == DefaultDriver:
			return -1
		case b.name == DefaultDriver:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// AboutNames lists the drivers the table says something of, in its order.
func AboutNames() []string {
	var n []string
	for _, a := range abouts() {
		n = append(n, a.name)
	}
	return n
}

// driverHelp is --driver's help: every driver the table knows of.
func driverHelp() string {
	var d []string
	for _, a := range abouts() {
		d = append(d, fmt.Sprintf("%q (%s)", a.name, a.help))
	}
	return "isolation driver: " + strings.Join(d, ", ")
}

// driverRow is the README's row of --driver in the table of `airlock
// run`'s flags.
func driverRow() string {
	var d []string
	for _, a := range abouts() {
		d = append(d, fmt.Sprintf("`%s` (%s)", a.name, a.help))
	}
	return fmt.Sprintf("| `--driver` | `%s` | isolation driver: %s |", DefaultDriver, strings.Join(d, ", "))
}

// Takes says whether driver takes the run flag flag ("image"…).
func Takes(driver, flag string) bool {
	for _, a := range driverAbouts {
		if a.name == driver {
			_, ok := a.flags[flag]
			return ok
		}
	}
	return false
}

// FlagDrivers lists the drivers that take the run flag flag.
func FlagDrivers(flag string) []string {
	var n []string
	for _, a := range abouts() {
		if _, ok := a.flags[flag]; ok {
			n = append(n, a.name)
		}
	}
	return n
}

// flagHelp is the help of the run flag flag: what, then what it means for
// each driver that takes it.
func flagHelp(flag, what string) string {
	var d []string
	for _, a := range abouts() {
		if m, ok := a.flags[flag]; ok {
			s := "--driver " + a.name
			if m != "" {
				s += ": " + m
			}
			d = append(d, s)
		}
	}
	if len(d) == 0 {
		return what + " (no driver of this build takes it)"
	}
	return what + "; only with " + strings.Join(d, "; ")
}

// forDrivers is the refusal of run flag flag given with a driver that
// does not take it.
func forDrivers(flag, driver string) error {
	var d []string
	for _, n := range FlagDrivers(flag) {
		d = append(d, "--driver "+n)
	}
	if len(d) == 0 {
		return fmt.Errorf("--%s is for no driver of this build", flag)
	}
	return fmt.Errorf("--%s is for %s, not --driver %s", flag, strings.Join(d, " or "), driver)
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
		if err == nil && e.Name != DefaultDriver {
			err = d.Probe(ctx)
		}
		if err != nil {
			if e.Name == DefaultDriver {
				return nil, err
			}
			log.Info("driver not available", "driver", e.Name, "err", err)
			continue
		}
		drivers[e.Name] = d
	}
	return drivers, nil
}
