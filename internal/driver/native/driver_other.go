//go:build !linux

package native

import "github.com/airlock-sandbox/airlock/internal/driver/agentdriver"

// Driver is the native driver; off Linux it can run nothing.
type Driver struct{ agentdriver.Unavailable }

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, agentdriver.Unavailable{Driver: "native", Needs: "Linux"}.Err()
}

// persistent is false: there are no sandboxes to outlive anything.
func (d *Driver) persistent() bool { return false }
