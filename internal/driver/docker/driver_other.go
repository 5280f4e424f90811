//go:build !linux

package docker

import "github.com/airlock-sandbox/airlock/internal/driver/agentdriver"

// Driver is the Docker driver; off Linux it can run nothing (the agent is
// a Linux program, and so are the host's cgroup checks).
type Driver struct{ agentdriver.Unavailable }

// New fails off Linux.
func New(Options) (*Driver, error) {
	return nil, agentdriver.Unavailable{Driver: "docker", Needs: "Linux"}.Err()
}
