//go:build !no_native

package cli

import (
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	aboutDriver(driverAbout{name: "native", help: "namespaces, seccomp, Landlock", flags: imageRootFlags})
	RegisterDriver("native", func(o DriverOptions) (sandbox.Driver, error) {
		d, err := native.New(native.Options{Logger: o.Logger, Egress: o.Egress, Persistent: o.Instance != ""})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
}
