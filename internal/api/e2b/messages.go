package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The messages of envd's Process and Filesystem services, written from
// their field lists in proto3's JSON form, which is what the SDKs send
// (Connect protocol, JSON codec): lowerCamel names, bytes in base64,
// int64 as a string, enums by name, a oneof as the one member that is set,
// default values left out. Unknown fields are ignored on the way in (newer
// SDKs add some) and never sent: the SDKs refuse fields they do not know.

// jsonCodec is Connect's "json" codec for these plain structs (Connect's
// own needs protobuf messages).
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

func (jsonCodec) Unmarshal(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// u32 is a uint32 that proto3's JSON may write as a number or a string.
type u32 uint32

func (n *u32) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseUint(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("want an unsigned 32-bit number, got %s", b)
	}
	*n = u32(v)
	return nil
}

// ---- process.Process

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type termSize struct {
	Cols u32 `json:"cols"`
	Rows u32 `json:"rows"`
}

type ptyConfig struct {
	Size *termSize `json:"size,omitempty"`
}

type startRequest struct {
	Process *processConfig `json:"process"`
	PTY     *ptyConfig     `json:"pty,omitempty"`
	Tag     *string        `json:"tag,omitempty"`
	Stdin   *bool          `json:"stdin,omitempty"`
}

// processSelector names a process by pid or by tag.
type processSelector struct {
	PID *u32    `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type connectRequest struct {
	Process *processSelector `json:"process"`
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid,omitempty"`
}

// dataEvent holds one of the three.
type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	PTY    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// eventResponse is StartResponse and ConnectResponse.
type eventResponse struct {
	Event processEvent `json:"event"`
}

type listRequest struct{}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid,omitempty"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

type processInput struct {
	Stdin *[]byte `json:"stdin,omitempty"`
	PTY   *[]byte `json:"pty,omitempty"`
}

type sendInputRequest struct {
	Process *processSelector `json:"process"`
	Input   *processInput    `json:"input"`
}

// signal is the Signal enum: a name or a number.
type signal int32

func (s *signal) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		switch name {
		case "SIGNAL_UNSPECIFIED":
			*s = 0
		case "SIGNAL_SIGTERM":
			*s = 15
		case "SIGNAL_SIGKILL":
			*s = 9
		default:
			return fmt.Errorf("unknown signal %q", name)
		}
		return nil
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a signal name or number, got %s", b)
	}
	*s = signal(n)
	return nil
}

type sendSignalRequest struct {
	Process *processSelector `json:"process"`
	Signal  signal           `json:"signal"`
}

type closeStdinRequest struct {
	Process *processSelector `json:"process"`
}

type updateRequest struct {
	Process *processSelector `json:"process"`
	PTY     *ptyConfig       `json:"pty,omitempty"`
}

// empty is every response without fields.
type empty struct{}

// ---- filesystem.Filesystem

// The FileType and EventType enums, by name.
const (
	fileTypeFile    = "FILE_TYPE_FILE"
	fileTypeDir     = "FILE_TYPE_DIRECTORY"
	fileTypeSymlink = "FILE_TYPE_SYMLINK"

	eventCreate = "EVENT_TYPE_CREATE"
	eventWrite  = "EVENT_TYPE_WRITE"
	eventRemove = "EVENT_TYPE_REMOVE"
	eventChmod  = "EVENT_TYPE_CHMOD"
)

type entryInfo struct {
	Name          string     `json:"name,omitempty"`
	Type          string     `json:"type,omitempty"`
	Path          string     `json:"path,omitempty"`
	Size          int64      `json:"size,omitempty,string"`
	Mode          uint32     `json:"mode,omitempty"`
	Permissions   string     `json:"permissions,omitempty"`
	Owner         string     `json:"owner,omitempty"`
	Group         string     `json:"group,omitempty"`
	ModifiedTime  *time.Time `json:"modifiedTime,omitempty"`
	SymlinkTarget *string    `json:"symlinkTarget,omitempty"`
}

type pathRequest struct {
	Path string `json:"path"`
}

type entryResponse struct {
	Entry *entryInfo `json:"entry,omitempty"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type listDirRequest struct {
	Path  string `json:"path"`
	Depth u32    `json:"depth"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries"`
}

type watchRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

type fsEvent struct {
	Name  string     `json:"name,omitempty"`
	Type  string     `json:"type,omitempty"`
	Entry *entryInfo `json:"entry,omitempty"`
}

type watchResponse struct {
	Start      *struct{} `json:"start,omitempty"`
	Filesystem *fsEvent  `json:"filesystem,omitempty"`
	Keepalive  *struct{} `json:"keepalive,omitempty"`
}

type createWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

type watcherRequest struct {
	WatcherID string `json:"watcherId"`
}

type watcherEventsResponse struct {
	Events []fsEvent `json:"events"`
}
