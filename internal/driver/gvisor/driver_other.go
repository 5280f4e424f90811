//go:build !linux

package gvisor

import "github.com/airlock-sandbox/airlock/internal/driver/agentdriver"

// Driver is the gvisor driver; off Linux it can run nothing.
type Driver struct{ agentdriver.Unavailable }

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, agentdriver.Unavailable{Driver: "gvisor", Needs: "Linux"}.Err()
}
