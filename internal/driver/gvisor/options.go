// Package gvisor runs sandboxes in gVisor: each sandbox is an OCI bundle
// run by runsc, whose user-space kernel (the Sentry) stands between the
// workload and the host's kernel. Inside, the same agent as the native
// driver's is the container's only process and serves the host over the
// container's stdin and stdout; it runs every command as uid 1000 with no
// capabilities, no_new_privs and the seccomp allowlist, each in its own
// group of gVisor's cgroup file system. On the host, the sandbox's cgroup
// bounds gVisor's processes and the workload together.
//
// Which runsc: the one `make runsc` builds (a pinned gVisor, platform
// systrap), else a runsc on PATH (see runsc.Find and
// docs/decisions.md).
package gvisor

import (
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Options configure the driver. The zero value is ready to use.
type Options struct {
	// Runsc is the runsc binary. Empty means the one airlock builds
	// (runsc.PinnedPath), else runsc on PATH.
	Runsc string
	// Platform is runsc's platform. Empty means systrap where this runsc
	// has it, else ptrace. (KVM is not chosen by default: it hangs on hosts
	// whose /dev/kvm is not the real thing.)
	Platform string
	// Agent is the agent's binary, bound into every sandbox. Empty means
	// the one this airlock ships.
	Agent string
	// StateDir holds the locks shared with the native driver, and below
	// gvisor/ the sandboxes' bundles and runsc's state. Empty means
	// /run/airlock.
	StateDir string
	// CgroupParent is the group below each hierarchy's root that holds the
	// sandboxes. Empty means "airlock".
	CgroupParent string
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// Egress is the proxy that sandboxes in network mode egress reach. Nil
	// means one of the driver's own, with the default limits and no
	// secrets.
	Egress *egress.Proxy
	// Persistent makes sandboxes outlive the process that made them, as a
	// daemon's must: `runsc run` is nobody's child to die with and holds
	// the sandbox's lock, its output goes to a log file in the bundle, and
	// the agent serves the host on a unix socket it makes in a root-only
	// directory of the bundle (runsc --host-uds=create); a later process
	// reattaches (Recover). False: a sandbox dies with its process, as a
	// one-shot run's must (the agent talks over runsc's stdio).
	Persistent bool
}

// shared are the options every agent driver takes (agentdriver.Recipe).
func (o Options) shared() agentdriver.Shared {
	return agentdriver.Shared{Logger: o.Logger, StateDir: o.StateDir, CgroupParent: o.CgroupParent, Egress: o.Egress, Agent: o.Agent, Persistent: o.Persistent}
}
