// Package docker runs sandboxes as hardened containers of a Docker Engine,
// with the runtime each sandbox names (runc by default, runsc for gVisor,
// kata where installed), from images the engine already has.
//
// Each sandbox is one container whose only process is airlock's agent, as
// in the gVisor driver: the engine builds the root (the image, read-only),
// the namespaces and the cgroup with the limits; the agent, root of the
// container with a short list of capabilities, runs every command as uid
// 1000 with none, no_new_privs and its own seccomp filter, inside the
// engine's default seccomp profile. The host speaks the agent's protocol
// over the container's attach stream. The agent's binary comes from a
// volume the driver fills once per agent version through the API, so the
// image is never changed and the engine may be remote (DOCKER_HOST).
//
// A daemon's containers outlive it (Options.Persistent): Close removes a
// sandbox's container; a daemon that restarts reattaches to its live ones
// (Recover) and Sweep removes the rest (labels airlock.sandbox and
// airlock.daemon, and the sandbox-id lock of the process that owns one). A
// one-shot run's container dies with the run.
// See docs/decisions.md.
package docker

import (
	"io"
	"log/slog"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Options configure the driver. The zero value is ready to use once a
// sandbox names its image.
type Options struct {
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://10.0.0.5:2376"). Empty means the environment, as the docker
	// CLI reads it (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), else
	// the local socket.
	Host string
	// Image is the image of a sandbox whose Spec names none. Empty: every
	// Spec must name one.
	Image string
	// Runtime is the runtime of a sandbox whose Spec names none. Empty
	// means "runc".
	Runtime string
	// Instance names the airlock process that makes the containers: it is
	// their label airlock.daemon, and Sweep removes only containers of its
	// own instance (and of the one-shot runs of this host). Empty means
	// "run@<host name>", the one-shot CLI's.
	Instance string
	// Persistent makes sandboxes outlive the process that made them, as a
	// daemon's must (it reattaches after a restart: Recover). False: a
	// sandbox dies with its process, as a one-shot run's must: the engine
	// closes the agent's input when the process goes, the agent then
	// ends, and the engine removes the container.
	Persistent bool
	// StateDir holds the sandbox-id locks shared with the other drivers.
	// Empty means /run/airlock.
	StateDir string
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// Progress receives the progress of a pull of an image the engine
	// lacks, as airlock's own pull shows it (layers and bytes; redrawn in
	// place on a terminal), on the one-shot CLI's stderr. Nil: only the
	// log has it.
	Progress io.Writer
	// Egress is the proxy that sandboxes in network mode egress reach. Nil
	// means one of the driver's own, with the default limits and no
	// secrets.
	Egress *egress.Proxy
}

// Labels on everything the driver makes.
const (
	// LabelSandbox holds the sandbox's id.
	LabelSandbox = "airlock.sandbox"
	// LabelDaemon holds the Instance of the airlock that made it.
	LabelDaemon = "airlock.daemon"
	// LabelAgent marks a volume that holds the agent's binary, with the
	// binary's sha256.
	LabelAgent = "airlock.agent"
)

// DefaultRuntime is the runtime of a sandbox when neither its Spec nor the
// Options name one.
const DefaultRuntime = "runc"

// RunInstance is the Instance of one-shot runs on the host called
// hostname.
func RunInstance(hostname string) string { return "run@" + hostname }

// shared are the options every agent driver takes (agentdriver.Recipe).
func (o Options) shared() agentdriver.Shared {
	return agentdriver.Shared{Logger: o.Logger, StateDir: o.StateDir, Egress: o.Egress, Persistent: o.Persistent}
}
