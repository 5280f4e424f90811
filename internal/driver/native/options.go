// Package native is airlock's default driver: each sandbox is a set of new
// Linux namespaces (user, pid, mount, network, IPC, UTS, cgroup) with its
// own host uid range, a composed read-only root, cgroup limits, a seccomp
// allowlist, Landlock, no capabilities and a non-root uid, run by the
// in-sandbox agent.
package native

import (
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Options configure the driver. The zero value is ready to use.
type Options struct {
	// CgroupParent is the group below each hierarchy's root that holds the
	// sandboxes. Empty means "airlock".
	CgroupParent string
	// StateDir holds the locks that tie sandboxes and uid ranges to the
	// process that owns them. Empty means /run/airlock.
	StateDir string
	// Agent is the agent's binary. Empty means the one this airlock
	// ships.
	Agent string
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// Egress is the proxy that sandboxes in network mode egress reach. Nil
	// means one of the driver's own, with the default limits and no
	// secrets.
	Egress *egress.Proxy
	// Persistent makes sandboxes outlive the process that made them, as a
	// daemon's must: the agent is nobody's child to die with, it holds the
	// sandbox's locks itself and serves the host on a root-only socket
	// (StateDir/sessions/ID.sock), and a later process reattaches
	// (Recover). False: a sandbox dies with its process, as a one-shot
	// run's must (the agent has a parent-death signal).
	Persistent bool
}

// shared are the options every agent driver takes (agentdriver.Recipe).
func (o Options) shared() agentdriver.Shared {
	return agentdriver.Shared{Logger: o.Logger, StateDir: o.StateDir, CgroupParent: o.CgroupParent, Egress: o.Egress, Agent: o.Agent, Persistent: o.Persistent}
}
