// Package agent is the protocol between the host and airlock's in-sandbox
// agent (package agentd), and the host's client for it.
//
// The agent runs as PID 1 inside every sandbox that has a Linux userland. It
// sets up the sandbox's root, then serves the host over one byte
// stream: Connect RPCs (connectrpc.com/connect, JSON codec) over HTTP/2
// without TLS. HTTP/2 carries many concurrent streams with flow control over
// the one connection, so execs, file transfers and (later) tunnelled TCP
// connections share it without blocking each other. The transport (a
// socketpair, a container's stdio, a virtio-serial port) is the driver's
// business: ServeConn and Dial take any net.Conn.
//
// Every call begins with Hello, the version handshake.
package agent

import (
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Version is the protocol version. The host refuses an agent that speaks another.
const Version = 3

// Procedure paths.
const (
	service       = "/airlock.agent.v1.Agent/"
	ProcHello     = service + "Hello"
	ProcExec      = service + "Exec"
	ProcSignal    = service + "Signal"
	ProcReadFile  = service + "ReadFile"
	ProcWriteFile = service + "WriteFile"
	ProcReadDir   = service + "ReadDir"
	ProcStat      = service + "Stat"
	ProcMkdir     = service + "Mkdir"
	ProcRemove    = service + "Remove"
	ProcRename    = service + "Rename"
	ProcSymlink   = service + "Symlink"
	ProcResolve   = service + "Resolve"
)

// MaxMessage caps every message either side accepts.
const MaxMessage = 4 << 20

// ChunkSize is the largest data chunk one message carries.
const ChunkSize = 32 << 10

// HelloRequest opens the conversation.
type HelloRequest struct {
	Version int `json:"version"`
}

// HelloResponse says who answered.
type HelloResponse struct {
	Version int `json:"version"`
	// Layers the agent put in place inside the sandbox.
	Layers []sandbox.Layer `json:"layers"`
}

// ExecStart is the first message of an Exec stream.
type ExecStart struct {
	// ID names the exec; the host chooses it and it names the exec's cgroup.
	ID         string   `json:"id"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	Dir        string   `json:"dir"`
	TimeoutMS  int64    `json:"timeout_ms"`
	CPUTimeMS  int64    `json:"cpu_time_ms"`
	Background bool     `json:"background"`
	// Stdin says the host will send input; without it stdin is empty.
	Stdin bool `json:"stdin"`
	// OutputLimit caps each output stream in bytes.
	OutputLimit int64 `json:"output_limit"`
	// PTY, when set, runs the command on a terminal of this size that the
	// agent opens inside the sandbox (see sandbox.ExecRequest.PTY). Its
	// output comes as Stdout; the host keeps the input half of the stream
	// open for stdin and resizes.
	PTY *sandbox.TermSize `json:"pty,omitempty"`
}

// ExecInput is a message of the host's half of an Exec stream: the start,
// then stdin data and (on a terminal) resizes, then (optionally) the end
// of stdin. On a terminal the end of stdin changes nothing: the terminal
// stays open, and typing Ctrl-D is how a program reads an end of file.
type ExecInput struct {
	Start    *ExecStart `json:"start,omitempty"`
	Stdin    []byte     `json:"stdin,omitempty"`
	StdinEOF bool       `json:"stdin_eof,omitempty"`
	// Resize sets the size of the exec's terminal.
	Resize *sandbox.TermSize `json:"resize,omitempty"`
}

// ExecEvent is a message of the agent's half of an Exec stream.
type ExecEvent struct {
	// Started carries the exec's main pid (inside the sandbox) once it runs.
	Started int `json:"started,omitempty"`
	// Cgroup names the exec's group below the sandbox's workload group,
	// sent with Started.
	Cgroup string `json:"cgroup,omitempty"`
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	// Exit is the last event.
	Exit *sandbox.Result `json:"exit,omitempty"`
}

// SignalRequest sends a signal to an exec.
type SignalRequest struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
}

// PathRequest names a path, with the extras some calls need.
type PathRequest struct {
	Path string `json:"path"`
	// To is Rename's new path and Symlink's target.
	To     string `json:"to,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
	// NoFollow makes a write follow no symlink on the way to its file.
	NoFollow bool `json:"no_follow,omitempty"`
}

// FileChunk carries file data. The first chunk of a WriteFile stream holds
// the path and mode.
type FileChunk struct {
	Path string `json:"path,omitempty"`
	Mode uint32 `json:"mode,omitempty"`
	// NoFollow, on the first chunk, makes the write follow no symlink on
	// the way to its file.
	NoFollow bool   `json:"no_follow,omitempty"`
	Data     []byte `json:"data,omitempty"`
}

// FileList is the answer to ReadDir and Stat.
type FileList struct {
	Files []sandbox.FileInfo `json:"files"`
}

// Empty is an empty message.
type Empty struct{}
