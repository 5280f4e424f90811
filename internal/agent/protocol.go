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
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Version is the protocol version. The host refuses to work with an agent
// that speaks another: a sandbox reattached after an upgrade whose agent
// speaks another version runs on, but only ends.
//
// It is a variable, set from protocolVersion, so that a build can claim
// another version (-ldflags "-X
// github.com/airlock-sandbox/airlock/internal/agent.protocolVersion=99"),
// which is how the upgrade test makes a daemon of a different protocol.
// The daemon and its agent must be built with the same value.
var Version = versionOf(protocolVersion)

// protocolVersion is Version as text, for -ldflags -X.
var protocolVersion = "5"

func versionOf(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		panic("agent: protocol version " + strconv.Quote(s) + " is not a positive number")
	}
	return n
}

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
	ProcList      = service + "List"
	ProcForget    = service + "Forget"
)

// MaxMessage caps every message either side accepts.
const MaxMessage = 4 << 20

// ChunkSize is the largest data chunk one message carries.
const ChunkSize = 32 << 10

// HelloRequest opens the conversation.
type HelloRequest struct {
	Version int `json:"version"`
}

// HelloResponse says who answered. An agent answers whatever version the
// host speaks; the host decides whether it can work with it. (Agents of
// protocol 3 and before refused a host of another version instead.)
type HelloResponse struct {
	Version int `json:"version"`
	// Layers the agent put in place inside the sandbox.
	Layers []sandbox.Layer `json:"layers"`
	// ExecSeq is the highest N of the exec ids "eN" the agent has started:
	// a host that reattaches continues from there, so that an id names
	// one exec for the sandbox's life.
	ExecSeq int64 `json:"exec_seq,omitempty"`
	// Persistent says the sandbox outlives its host sessions (see
	// Config.Listen).
	Persistent bool `json:"persistent,omitempty"`
	// Tunnels says the agent took this session's tunnel channel: it hands
	// tunnelled connections to the host (tunnel.go).
	Tunnels bool `json:"tunnels,omitempty"`
	// ExecSockets says the agent takes exec sockets passed on this
	// session (execsock.go).
	ExecSockets bool `json:"exec_sockets,omitempty"`
	// LazyTunnels says the agent takes a tunnel channel passed later in
	// the session, as an exec socket whose first frame is
	// ExecFrameTunnel (lazytunnel.go).
	LazyTunnels bool `json:"lazy_tunnels,omitempty"`
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
	// OutputBuffer is how many of the latest bytes of each output stream
	// the agent keeps, for a host that attaches to the exec later (after a
	// restart); 0 means min(OutputLimit, DefaultOutputBuffer). While a
	// stream is attached nothing is dropped: the command waits for it.
	OutputBuffer int64 `json:"output_buffer,omitempty"`
}

// DefaultOutputBuffer is the agent's buffer per output stream when the host
// names none.
const DefaultOutputBuffer = 1 << 20

// ExecAttach, as the first message of an Exec stream instead of a start,
// attaches to a running or ended exec that the agent still holds: the
// stream then carries its output from the given offsets of each stream
// (from the oldest byte held, when those are gone) and its end, and feeds
// its stdin and terminal. A new attachment replaces the one before.
type ExecAttach struct {
	ID           string `json:"id"`
	StdoutOffset int64  `json:"stdout_offset"`
	StderrOffset int64  `json:"stderr_offset"`
}

// ExecInput is a message of the host's half of an Exec stream: the start,
// then stdin data and (on a terminal) resizes, then (optionally) the end
// of stdin. On a terminal the end of stdin changes nothing: the terminal
// stays open, and typing Ctrl-D is how a program reads an end of file.
type ExecInput struct {
	Start    *ExecStart  `json:"start,omitempty"`
	Attach   *ExecAttach `json:"attach,omitempty"`
	Stdin    []byte      `json:"stdin,omitempty"`
	StdinEOF bool        `json:"stdin_eof,omitempty"`
	// Resize sets the size of the exec's terminal.
	Resize *sandbox.TermSize `json:"resize,omitempty"`
	// Forget, on an exec socket (execsock.go) after the exec's result,
	// is Forget's call: the host has the result.
	Forget bool `json:"forget,omitempty"`
}

// ExecEvent is a message of the agent's half of an Exec stream.
type ExecEvent struct {
	// Started carries the exec's main pid (inside the sandbox) once it runs.
	Started int `json:"started,omitempty"`
	// Cgroup names the exec's group below the sandbox's workload group,
	// sent with Started.
	Cgroup string `json:"cgroup,omitempty"`
	// StdoutOffset and StderrOffset, sent with Started, are the offsets in
	// each output stream of the first byte the stream carries: 0 for a new
	// exec; for an attachment, where it begins.
	StdoutOffset int64  `json:"stdout_offset,omitempty"`
	StderrOffset int64  `json:"stderr_offset,omitempty"`
	Stdout       []byte `json:"stdout,omitempty"`
	Stderr       []byte `json:"stderr,omitempty"`
	// Exit is the last event.
	Exit *sandbox.Result `json:"exit,omitempty"`
}

// ExecList is the answer to List: every exec the agent holds, running or
// ended and not yet forgotten (see Forget), oldest first.
type ExecList struct {
	Execs []ExecInfo `json:"execs"`
}

// ExecInfo describes an exec the agent holds.
type ExecInfo struct {
	ID         string            `json:"id"`
	Argv       []string          `json:"argv"`
	Background bool              `json:"background,omitempty"`
	PTY        *sandbox.TermSize `json:"pty,omitempty"`
	Pid        int               `json:"pid"`
	Cgroup     string            `json:"cgroup,omitempty"`
	// StartedMS is when it started, in Unix milliseconds.
	StartedMS   int64 `json:"started_ms"`
	TimeoutMS   int64 `json:"timeout_ms,omitempty"`
	CPUTimeMS   int64 `json:"cpu_time_ms,omitempty"`
	OutputLimit int64 `json:"output_limit,omitempty"`
	// Stdin says its standard input is still open for the host's data.
	Stdin bool `json:"stdin,omitempty"`
	// Result is set once it has ended.
	Result *sandbox.Result `json:"result,omitempty"`
}

// ForgetRequest drops an ended exec the host has the result of.
type ForgetRequest struct {
	ID string `json:"id"`
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
