// Package sandbox defines what every isolation backend provides: the Spec a
// sandbox is made from, the Driver that makes it, the Instance that runs
// commands in it, and the Result that says how a command ended and why.
//
// It imports no other package of airlock; drivers, the supervisor, the API
// and the CLI all point inward to it.
package sandbox

import (
	"context"
	"io"
	"io/fs"
	"syscall"
	"time"
)

// Driver runs sandboxes on one isolation backend.
type Driver interface {
	// Name is the driver's name on the command line ("native", "gvisor").
	Name() string
	// Probe says why this host cannot run the backend. The error wraps
	// ErrUnsupported and names the missing piece and its fix.
	Probe(ctx context.Context) error
	// Capabilities says what the driver's sandboxes can do. It is known
	// without probing the host; Probe says whether the host can run them.
	Capabilities() Capabilities
	// Create makes a sandbox from spec and returns it running and idle.
	// A sandbox half-built when an error occurs is removed before Create
	// returns.
	Create(ctx context.Context, spec Spec) (Instance, error)
}

// RunCreator is a driver that can make a sandbox with its first command
// sent along, as a one-shot run does: the sandbox starts req as soon as it
// is built, with no round trip before it, and the instance's first Start,
// which must be req (its readers and writers may be others), follows it
// (docs/decisions.md, 91).
type RunCreator interface {
	CreateRun(ctx context.Context, spec Spec, req ExecRequest) (Instance, error)
}

// Instance is one live sandbox. All methods are safe for concurrent use.
type Instance interface {
	// ID is the sandbox's identifier.
	ID() string
	// Layers lists the isolation layers in effect, as Layer names.
	Layers() []Layer
	// Start starts a command and returns at once. The command runs until it
	// exits, is killed, times out, or the sandbox closes. ctx bounds the
	// start only. Run runs a command to its end.
	Start(ctx context.Context, req ExecRequest) (Process, error)
	// Files reaches the sandbox's file system; every path is resolved inside
	// the sandbox's own root.
	Files() Files
	// Close kills every process of the sandbox and removes everything the
	// sandbox made on the host. It succeeds even when ctx is done.
	Close(ctx context.Context) error
	// Done is closed when the sandbox has ended (closed, or its agent died).
	Done() <-chan struct{}
}

// Process is a command started by Instance.Start.
type Process interface {
	// ID is the exec's identifier within its sandbox.
	ID() string
	// Wait waits until the command has ended and returns how. Cancelling ctx
	// stops the waiting, not the command.
	Wait(ctx context.Context) (Result, error)
	// Signal sends sig to the command's main process. SIGKILL kills every
	// process of the exec, however it forked or detached.
	Signal(ctx context.Context, sig syscall.Signal) error
}

// Files is the sandbox's file API. Paths are absolute inside the sandbox or
// relative to /workspace; "..", symlinks and mounts never lead outside the
// sandbox's root.
type Files interface {
	// ReadFile copies at most limit bytes (0: no limit) from offset of the file at path to w.
	ReadFile(ctx context.Context, path string, offset, limit int64, w io.Writer) error
	// WriteFile creates or replaces the file at path with what r holds.
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error
	// ReadDir lists the directory at path.
	ReadDir(ctx context.Context, path string) ([]FileInfo, error)
	// Stat describes the file at path without following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// Mkdir creates the directory at path and any missing parents.
	Mkdir(ctx context.Context, path string, mode fs.FileMode) error
	// Remove removes the file or the whole directory tree at path.
	Remove(ctx context.Context, path string) error
	// Rename moves oldpath to newpath.
	Rename(ctx context.Context, oldpath, newpath string) error
	// Symlink makes a symlink at path that points to target. The target is
	// stored as given and never followed by the file API; path must not
	// exist.
	Symlink(ctx context.Context, target, path string) error
	// Resolve returns the path inside the sandbox that path leads to: every
	// symlink of its directories resolved, its last element as given (a
	// write replaces a symlink there, never follows it), directories that
	// do not exist yet as written.
	Resolve(ctx context.Context, path string) (string, error)
	// NoFollow returns the same file API whose writes (WriteFile, Mkdir,
	// Remove, Rename, Symlink) follow no symlink on the way to their file:
	// a path that Resolve returned is written where it was checked, even
	// when a command swaps one of its directories for a symlink meanwhile.
	NoFollow() Files
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Target is where a symlink points, as stored (it is not followed).
	Target string `json:"target,omitempty"`
}

// ExecRequest says what to run.
type ExecRequest struct {
	// Argv is the command and its arguments. A command without a slash is
	// looked up on the sandbox's PATH. Required.
	Argv []string
	// Env adds to the command's environment, as "KEY=VALUE". A command's
	// environment is the defaults (PATH, HOME=/workspace, LANG=C.UTF-8,
	// USER, HOSTNAME), then the sandbox's Spec.Env, then Env; a later entry
	// replaces an earlier one with the same key. Nothing else of anybody's
	// environment reaches a command.
	Env []string
	// Dir is the working directory inside the sandbox. Empty means /workspace.
	Dir string
	// Stdin is copied to the command's standard input (a pipe); nil means
	// an empty input.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it is produced; nil
	// discards it. Writes happen from one goroutine per stream.
	Stdout, Stderr io.Writer
	// Timeout bounds the command's wall time. Zero means the sandbox's
	// default for a foreground command (10 s unless the spec says), and
	// none for a background one or one on a terminal (PTY: it runs at a
	// person's pace, and ends with its sandbox).
	Timeout time.Duration
	// CPUTime bounds the user+system CPU time of every process of the exec.
	// Zero means the sandbox's default (unlimited unless set).
	CPUTime time.Duration
	// Background keeps the exec's other processes alive when its main process
	// exits. Otherwise every process the command started is killed when it
	// ends: a command owns its whole process tree. A background exec has no
	// output limit (Limits.OutputBytes applies to foreground ones): its
	// output flows to Stdout and Stderr as long as it runs, and whoever
	// reads it keeps what it wants of it.
	Background bool
	// PTY, when set, runs the command on a terminal of that size, made
	// inside the sandbox: the terminal is its standard input, output and
	// error, and its controlling terminal in a new session. Its output
	// comes to Stdout alone (the terminal merges the two streams; the
	// output limit and StdoutTruncated apply to it) and Stderr gets
	// nothing; Stdin is typed into it (control characters too: Ctrl-C
	// reaches the foreground process group as SIGINT), and the end of
	// Stdin leaves the terminal open. The process can be resized
	// (Resizer). Nil means pipes. A driver without terminals (see
	// Capabilities.PTY) refuses it with an UnsupportedError.
	PTY *TermSize
	// OutputBuffer is how many of the latest bytes of each output stream
	// the sandbox itself keeps, for a process that reattaches after a
	// restart (ProcessAttacher). Zero means the driver's default (the
	// output limit, at most 1 MiB).
	OutputBuffer int64
}

// TermSize is the size of a terminal, in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// MaxTermSide is the most rows or columns a terminal may have.
const MaxTermSide = 4096

// Validate checks that both sides are between 1 and MaxTermSide.
func (t TermSize) Validate() error {
	if t.Rows == 0 || t.Cols == 0 || t.Rows > MaxTermSide || t.Cols > MaxTermSide {
		return invalid("terminal size %dx%d: give rows and cols between 1 and %d", t.Rows, t.Cols, MaxTermSide)
	}
	return nil
}

// Reason says why an exec ended.
type Reason string

const (
	ReasonExit        Reason = "exit"         // the command ended by itself
	ReasonTimeout     Reason = "timeout"      // the wall-time limit killed it
	ReasonCPUTime     Reason = "cpu_time"     // the CPU-time limit killed it
	ReasonOOM         Reason = "oom"          // the memory limit killed it
	ReasonPids        Reason = "pids"         // it failed on the process limit
	ReasonOutputLimit Reason = "output_limit" // it printed more than allowed
	ReasonKilled      Reason = "killed"       // a caller killed it, or the sandbox closed
	ReasonDenied      Reason = "denied"       // policy refused it; it never ran
	ReasonError       Reason = "error"        // airlock itself failed
)

// Limit names a limit a command can run into.
type Limit string

const (
	LimitMemory   Limit = "memory"
	LimitPids     Limit = "pids"
	LimitTimeout  Limit = "timeout"
	LimitCPUTime  Limit = "cpu_time"
	LimitOutput   Limit = "output"
	LimitDiskFull Limit = "disk_full"
)

// Result says how an exec ended.
type Result struct {
	// ExitCode is the main process's exit status, or -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the main process ("SIGKILL"), or is empty.
	Signal string `json:"signal,omitempty"`
	// Reason says why the exec ended.
	Reason Reason `json:"reason"`
	// LimitsHit lists every limit reached during the run, even those the
	// program survived.
	LimitsHit []Limit `json:"limits_hit"`
	// Message is one line a model can act on; empty when the command simply exited.
	Message string `json:"message,omitempty"`
	// StdoutTruncated and StderrTruncated say output past the limit was cut.
	StdoutTruncated bool  `json:"stdout_truncated"`
	StderrTruncated bool  `json:"stderr_truncated"`
	Usage           Usage `json:"usage"`
	// Rollback is set when the exec asked for rollback on failure: what
	// was undone, or why nothing was.
	Rollback *Rollback `json:"rollback,omitempty"`
}

// Usage is what an exec consumed, read from the host's own counters where
// the driver can see them.
type Usage struct {
	WallMS          int64 `json:"wall_ms"`
	CPUMS           int64 `json:"cpu_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	BytesWritten    int64 `json:"bytes_written"`
}

// Hit reports whether l is in r.LimitsHit.
func (r Result) Hit(l Limit) bool {
	for _, h := range r.LimitsHit {
		if h == l {
			return true
		}
	}
	return false
}
