package sandbox

import (
	"context"
	"io"
	"path/filepath"
	"strconv"
	"time"
)

// Optional features of drivers and instances, each an interface of its own.
// Driver and Instance do not grow.
//
// Where a feature is also a capability, the capability is the answer and
// the interface only fetches the method: an instance may implement the
// interface while its driver lacks the capability (agentdriver.Instance
// implements them all, for every agent driver). So a caller asks the bool
// first, and only then type-asserts:
//
//	CowMounter                          Capabilities.CowMounts
//	Snapshotter                         Capabilities.Snapshots
//	Recoverer, StateHolder, Detacher,
//	ProcessAttacher                     Capabilities.SurvivesRestart
//	Resizer                             Capabilities.PTY
//	NetworkChanger                      Capabilities.Egress
//
// Overheader has no capability either: a driver that is none costs the
// host nothing beyond its sandboxes' limits.
//
// A caller inside a flow the bool already admitted (a Resize of a process
// CheckExec let start on a terminal, ProcessAttacher on an instance
// Recover returned) need not ask again. The other interfaces (Sweeper,
// UsageReader, Describer, AgentInstance, EndCause, PullReporter) have no
// capability: the type assertion is the answer.

// Sweeper is a driver that can remove what sandboxes of airlock processes
// that died without cleaning up left on the host (processes, cgroups,
// mounts, containers, locks). A sandbox whose owner lives is never touched.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// PullReporter is a driver whose engine pulls a sandbox's image itself
// (Docker's engine, a Kubernetes node), and that says how far that pull
// is while it creates the sandbox, so that a create that waits for a pull
// never looks hung.
type PullReporter interface {
	// PullOf is the pull the create of sandbox id waits for, if it waits
	// for one now.
	PullOf(id string) (ImagePull, bool)
}

// ImagePull is a pull in progress: layer Layer of Layers is being
// fetched, Bytes compressed bytes have come so far. Zero counts say that
// the engine tells no more than that it pulls Image.
type ImagePull struct {
	Image         string
	Layer, Layers int
	Bytes         int64
}

// NetworkChanger is an instance whose egress rules can change while it
// runs (Capabilities.Egress): SetNetwork replaces them with n's, a network
// in mode egress, and ends the connections the rules before admitted. An
// instance made without egress refuses with an error wrapping
// ErrUnsupported.
type NetworkChanger interface {
	SetNetwork(n Network) error
}

// UsageReader is an instance that can say what the whole sandbox uses now.
type UsageReader interface {
	// Usage reads the host's counters of the sandbox. An error wrapping
	// ErrUnsupported says the driver cannot see them.
	Usage(ctx context.Context) (SandboxUsage, error)
}

// SandboxUsage is what a whole sandbox uses, as the host counts it.
type SandboxUsage struct {
	// MemoryBytes is the memory in use now, file pages of its tmpfs
	// included where the host counts them.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryLimitBytes is the sandbox's memory limit.
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// CPUMS is the user+system CPU time used since the sandbox started.
	CPUMS int64 `json:"cpu_ms"`
	// CPUs is the CPU quota in cores.
	CPUs float64 `json:"cpus"`
	// At is when the counters were read.
	At time.Time `json:"at"`
}

// Overheader is a driver whose sandboxes cost the host more than their
// limits (HostBytes adds it).
type Overheader interface {
	// Overhead is what a sandbox of spec costs beyond its limits. Zero
	// fields of spec's limits mean their defaults.
	Overhead(spec Spec) Overhead
}

// Describer is a driver that can say which backend it uses here, for
// `airlock doctor` and logs ("runsc v…, platform systrap").
type Describer interface {
	Describe() string
}

// Resizer is a process started on a terminal (ExecRequest.PTY) that can be
// resized: the programs on it get SIGWINCH and read the new size.
type Resizer interface {
	// Resize sets the terminal's size. An error wrapping ErrInvalid says
	// the process has no terminal or the size is out of range; one
	// wrapping ErrNotFound, that the process has ended.
	Resize(ctx context.Context, size TermSize) error
}

// Surviving a restart of the process that made the sandboxes (the daemon):
// a driver that declares Capabilities.SurvivesRestart implements
// Recoverer, its instances StateHolder and Detacher, and, where commands
// run on across the restart, ProcessAttacher.

// Recoverer is a driver whose sandboxes outlive the process that made
// them, and that reattaches to one from what that process kept.
type Recoverer interface {
	// Recover reattaches to sandbox id from state, what its instance's
	// DriverState said when it was made, and returns it running: its
	// files, processes and background commands as they were. Recover
	// checks that what answers is the sandbox's own (the peer's
	// credentials, the sandbox's lock) and gives up at ctx's deadline.
	// State may be empty (a create that did not finish): the driver then
	// reattaches as far as needed to end it.
	//
	// On an error nothing of the sandbox is left: a holder that did not
	// answer in time has been killed, and what the sandbox left on the
	// host removed. The error wraps ErrNotFound when the sandbox was gone
	// already (its holder died). A driver that cannot reattach at all
	// (Capabilities.SurvivesRestart false) fails with ErrUnsupported.
	//
	// A sandbox whose agent speaks another protocol version is returned
	// too (AgentInstance says so): it runs on, and only ends (Close).
	Recover(ctx context.Context, id string, state []byte) (Instance, error)
}

// StateHolder is an instance that can say what a later process needs to
// reattach to it (Recoverer.Recover). The daemon keeps it in its registry.
type StateHolder interface {
	// DriverState is the state; nil when the sandbox cannot be reattached
	// (a one-shot run's, which dies with its process).
	DriverState() ([]byte, error)
}

// Detacher is an instance that this process can let go of without ending
// it: its connection closes, and the sandbox and its commands run on until
// a later process reattaches (Recoverer) or kills them. Calls on the
// instance fail afterwards; the Wait of a process still running returns
// ErrDetached. A daemon that stops cleanly detaches; a daemon killed with
// -9 is the same thing, unannounced.
type Detacher interface {
	Detach(ctx context.Context) error
}

// ProcessAttacher is an instance, reattached after a restart, whose
// commands started before it may still run, or have ended without anybody
// collecting their result.
type ProcessAttacher interface {
	// Processes lists them, oldest first.
	Processes(ctx context.Context) ([]ProcessState, error)
	// Attach follows process id (from Processes) as Start does a new one:
	// its output from where the sandbox's buffer of it begins goes to
	// req's writers, req.Stdin (when its input is open) feeds it, and
	// the returned Process waits for its end, signals and resizes it.
	Attach(ctx context.Context, id string, req AttachRequest) (Process, error)
}

// ProcessState describes a process a reattached instance found.
type ProcessState struct {
	ID   string
	Argv []string
	// Started is when it started.
	Started    time.Time
	Background bool
	// PTY is its terminal's size; nil on pipes.
	PTY *TermSize
	// Stdin says its standard input is open (it was started with input
	// kept open, or on a terminal).
	Stdin bool
	// Result is set once it has ended.
	Result *Result
}

// AttachRequest is where an attached process's output goes.
type AttachRequest struct {
	// Stdin feeds its standard input (or terminal), when it is open.
	Stdin io.Reader
	// Stdout and Stderr get its output, as ExecRequest's do.
	Stdout, Stderr io.Writer
	// Offsets, when set, is called before any output with the offsets in
	// each stream (the terminal's is stdout) of the first bytes Stdout and
	// Stderr get: the sandbox keeps only the latest output of a process.
	Offsets func(stdout, stderr int64)
}

// AgentInstance is an instance whose sandbox runs airlock's agent.
type AgentInstance interface {
	// AgentProtocol is the protocol version the sandbox's agent speaks,
	// and whether this airlock speaks it too. A sandbox reattached after
	// an upgrade may run an agent of another version: it runs on, every
	// call but Close fails with ErrMismatch, and Close ends it.
	AgentProtocol() (version int, ok bool)
}

// EndCause is an instance that can say why its sandbox ended by itself
// (its agent, or the runtime holding it, died), once Done is closed.
type EndCause interface {
	// Ended is the cause; nil when the sandbox was closed, or nothing is
	// known.
	Ended() error
}

// Snapshotter is an instance that can capture its writable trees and make
// them exactly a captured state again. Running processes are not part of
// what is captured: they go on running across a restore.
type Snapshotter interface {
	// Capture walks roots (Workspace, then optionally /tmp) and returns
	// every entry, sorted by path. Content the host lacks (req.Have) goes
	// to put before Capture returns, and every file's digest is one put
	// computed or Have knows. A file
	// that changed while it was read is read again; one that kept changing
	// is named in Capture.Unsettled. A tree holding a FIFO, socket or
	// device, deeper than MaxTreeDepth, or past max (files, bytes) fails
	// with an error wrapping ErrInvalid or ErrLimit that names the path,
	// and nothing in the sandbox changes.
	Capture(ctx context.Context, req CaptureRequest, put BlobPut) (Capture, error)
	// Apply makes roots exactly entries: what is not in entries is
	// removed, what differs is replaced, modes and symlinks set. Content
	// is fetched with get. The change is all or nothing as far as the
	// sandbox outlives it: an Apply that fails, is cancelled, or whose
	// host goes away before every blob arrived leaves the trees as they
	// were; once every blob arrived the agent finishes it on its own.
	Apply(ctx context.Context, req ApplyRequest, get BlobGet) (ApplyStats, error)
}

// CowMounter is an instance with copy-on-write mounts (Mount.Cow): the
// host keeps each one's layer, which package cow reads and applies.
type CowMounter interface {
	// CowLayers lists the cow mounts, in the order of Spec.Mounts.
	CowLayers() []CowLayer
}

// CowLayer is one copy-on-write mount of a sandbox.
type CowLayer struct {
	// Source is the host directory; Target where the sandbox sees it.
	Source, Target string
	// Dir is the host directory holding the layer (package cow's).
	Dir string
}

// CowLayers lists spec's cow mounts as a driver that keeps their layers
// below stateDir/cow/ID/N (package cow's layout) holds them.
func CowLayers(stateDir string, spec Spec) []CowLayer {
	var out []CowLayer
	for i, m := range spec.Mounts {
		if m.Cow {
			out = append(out, CowLayer{Source: m.Source, Target: m.Target, Dir: filepath.Join(stateDir, "cow", spec.ID, strconv.Itoa(i))})
		}
	}
	return out
}
