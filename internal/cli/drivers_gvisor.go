//go:build !no_gvisor

package cli

import (
	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	aboutDriver(driverAbout{name: "gvisor", help: "runsc's user-space kernel", flags: imageRootFlags})
	RegisterDriver("gvisor", func(o DriverOptions) (sandbox.Driver, error) {
		d, err := gvisor.New(gvisor.Options{Logger: o.Logger, Egress: o.Egress, Persistent: o.Instance != ""})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
