package mcp

import (
	"context"
	"github.com/airlock-sandbox/airlock/client"
	"io/fs"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

// Backend is the sandbox layer as one caller sees it. The tools are written
// once against it: Local calls the daemon's supervisor in this process,
// Remote calls a running daemon through the Go SDK in client/.
type Backend interface {
	// Create makes a sandbox.
	Create(ctx context.Context, req CreateRequest) (SandboxInfo, error)
	// List describes the caller's sandboxes, live and recently ended.
	List(ctx context.Context) ([]SandboxInfo, error)
	// Kill destroys a sandbox; killing one that has ended is not an error.
	Kill(ctx context.Context, id string) error
	// SetTimeout sets the sandbox's lifetime to d from now.
	SetTimeout(ctx context.Context, id string, d time.Duration) (SandboxInfo, error)

	// Exec runs a command to its end.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// Start starts a background process; keepStdin leaves its standard
	// input open for WriteStdin.
	Start(ctx context.Context, id string, req ExecRequest, keepStdin bool) (ProcessInfo, error)
	// Processes lists the processes of a sandbox: background processes
	// and execs.
	Processes(ctx context.Context, id string) ([]ProcessInfo, error)
	// Output returns process pid with what it printed from the offsets on,
	// as much as the sandbox keeps, without waiting.
	Output(ctx context.Context, id, pid string, stdoutOffset, stderrOffset int64) (ProcessInfo, error)
	// Wait waits at most d for process pid to end and returns it, with its
	// output once it has ended.
	Wait(ctx context.Context, id, pid string, d time.Duration) (ProcessInfo, error)
	// Signal sends sig to process pid.
	Signal(ctx context.Context, id, pid string, sig syscall.Signal) error
	// WriteStdin writes data to the standard input of process pid, then
	// closes it when eof is set.
	WriteStdin(ctx context.Context, id, pid string, data []byte, eof bool) error

	// ReadFile returns at most limit bytes (0: no limit) from offset of a file.
	ReadFile(ctx context.Context, id, path string, offset, limit int64) ([]byte, error)
	// WriteFile creates or replaces a file with mode's permission bits.
	WriteFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) error
	// ReadDir lists a directory.
	ReadDir(ctx context.Context, id, path string) ([]sandbox.FileInfo, error)
	// Stat describes a file without following a final symlink.
	Stat(ctx context.Context, id, path string) (sandbox.FileInfo, error)
	// Mkdir creates a directory and its missing parents.
	Mkdir(ctx context.Context, id, path string) error
	// Remove removes a file or a whole directory tree.
	Remove(ctx context.Context, id, path string) error
	// Rename moves from to to.
	Rename(ctx context.Context, id, from, to string) error

	// Snapshot snapshots a sandbox's /workspace (and /tmp).
	Snapshot(ctx context.Context, id string, req SnapshotRequest) (SnapshotInfo, error)
	// Snapshots lists a sandbox's snapshots, oldest first.
	Snapshots(ctx context.Context, id string) ([]SnapshotInfo, error)
	// Restore makes a sandbox's files a snapshot's (ref: id or name), or
	// their state before its last undo commands.
	Restore(ctx context.Context, id, ref string, undo int) (RestoreInfo, error)
	// Diff compares two states of a sandbox's files (see supervisor.DiffRequest).
	Diff(ctx context.Context, id, from, to string, step int64) (*snapshot.Diff, error)
	// Fork makes a new sandbox from snapshot ref (a name is looked up
	// among sandbox id's snapshots).
	Fork(ctx context.Context, id, ref string, ttl time.Duration) (SandboxInfo, error)

	// Export stores a sandbox's file or directory tree in the object store.
	Export(ctx context.Context, id string, req client.ExportRequest) (*client.ExportResult, error)

	// Changes lists the pending changes of a sandbox's copy-on-write
	// mounts; ApplyChanges and DiscardChanges decide them.
	Changes(ctx context.Context, id string) ([]client.CowMount, error)
	ApplyChanges(ctx context.Context, id string, r client.ChangesRequest) (*client.ApplyResult, error)
	DiscardChanges(ctx context.Context, id string, r client.ChangesRequest) (*client.DiscardResult, error)
}

// SnapshotRequest asks for a snapshot.
type SnapshotRequest struct {
	Name, Label string
	IncludeTmp  bool
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	ID, Name, Label, Sandbox, Kind string
	Step                           int64
	Files                          int
	Bytes                          int64
	Created                        time.Time
	Note                           string
}

// RestoreInfo says what a restore did.
type RestoreInfo struct {
	Snapshot                string
	Added, Changed, Removed int
}

// CreateRequest asks for a sandbox; zero fields take the template's values.
type CreateRequest struct {
	Template string
	TTL      time.Duration
	Env      map[string]string
}

// SandboxInfo describes a sandbox.
type SandboxInfo struct {
	ID        string
	Template  string
	State     string
	Created   time.Time
	ExpiresAt time.Time
	EndReason string
}

// ExecRequest says what to run: Argv, or Code in Language.
type ExecRequest struct {
	Argv     []string
	Code     string
	Language string
	Env      map[string]string
	Dir      string
	Stdin    []byte
	// Timeout bounds the wall time; zero means the sandbox's default.
	Timeout time.Duration
	// PTY runs it on a terminal of TermRows x TermCols: its output is one
	// stream, stdout.
	PTY bool
	// RollbackOnFailure restores /workspace when the command fails.
	RollbackOnFailure bool
}

// The size of the terminal of a command run with a PTY.
const (
	TermRows = 24
	TermCols = 80
)

// ExecResult is a finished command.
type ExecResult struct {
	Stdout, Stderr []byte
	Result         sandbox.Result
}

// ProcessInfo describes a process of a sandbox.
type ProcessInfo struct {
	ID         string
	Argv       []string
	Started    time.Time
	Running    bool
	Background bool
	PTY        bool
	// Result is set once it has ended; Stdout and Stderr only by Wait and
	// Output, starting at the offsets StdoutOffset and StderrOffset.
	Result                     *sandbox.Result
	Stdout, Stderr             []byte
	StdoutOffset, StderrOffset int64
}
