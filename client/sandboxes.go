package client

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// Limits bound a sandbox. Zero fields take the template's values; set
// fields may only narrow them.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int     `json:"pids,omitempty"`
	TimeoutMS   int64   `json:"timeout_ms,omitempty"`
	CPUTimeMS   int64   `json:"cpu_time_ms,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	TmpBytes    int64   `json:"tmp_bytes,omitempty"`
	OutputBytes int64   `json:"output_bytes,omitempty"`
	OpenFiles   int     `json:"open_files,omitempty"`
}

// CreateRequest asks for a sandbox.
type CreateRequest struct {
	// Template names the daemon's template; empty means "default".
	Template string `json:"template,omitempty"`
	// Driver names the driver ("wasm", "native", "gvisor"); empty means
	// the template's, or the one the daemon's policy chooses. A named
	// driver is kept, or the create is refused.
	Driver string            `json:"driver,omitempty"`
	Limits Limits            `json:"limits,omitzero"`
	Env    map[string]string `json:"env,omitempty"`
	// TTL is the sandbox's lifetime; zero means the template's.
	TTL time.Duration `json:"-"`
	// IdleTimeout destroys the sandbox after this long unused.
	IdleTimeout time.Duration `json:"-"`
	// Checkpoints keeps a snapshot of /workspace before each of the last
	// this many commands (0 to 64), named step-1, step-2…: see Diff's
	// Step and Restore's UndoSteps.
	Checkpoints int `json:"checkpoints,omitempty"`
	// Mounts are host paths to show inside, each named by the daemon's
	// policy (its mounts allowlist).
	Mounts []Mount `json:"mounts,omitempty"`
	// OnTimeout "pause" pauses the sandbox at its TTL instead of ending
	// it (a driver that can pause); AutoResume then has a call that needs
	// it running resume it first.
	OnTimeout  string `json:"on_timeout,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
}

// Mount makes a host path visible inside a sandbox: read-only, writable,
// or copy-on-write (Cow: the sandbox writes a layer of its own, and its
// changes reach the host when applied: see Changes, ApplyChanges).
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	Writable bool   `json:"writable,omitempty"`
	Cow      bool   `json:"cow,omitempty"`
}

// Sandbox states.
const (
	StateCreating = "creating"
	StatePooled   = "pooled"
	StateRunning  = "running"
	// StatePaused: its processes and memory are saved (PauseSandbox),
	// to be resumed (ResumeSandbox).
	StatePaused    = "paused"
	StateDestroyed = "destroyed"
	// StateLost: the sandbox was live when a daemon stopped, and the next
	// one could not take it up again (it had died meanwhile).
	StateLost = "lost"
)

// Sandbox describes a sandbox.
type Sandbox struct {
	ID                 string    `json:"id"`
	Template           string    `json:"template"`
	Driver             string    `json:"driver"`
	State              string    `json:"state"`
	Owner              string    `json:"owner,omitempty"`
	CreatedAt          time.Time `json:"created_at"`
	ExpiresAt          time.Time `json:"expires_at"`
	IdleTimeoutSeconds int64     `json:"idle_timeout_seconds,omitempty"`
	LastActiveAt       time.Time `json:"last_active_at"`
	EndedAt            time.Time `json:"ended_at"`
	EndReason          string    `json:"end_reason,omitempty"`
	// EndMessage says why it ended, in words.
	EndMessage string `json:"end_message,omitempty"`
	// AgentProtocol is the protocol version of the sandbox's agent (0: no
	// agent, or not known).
	AgentProtocol int `json:"agent_protocol,omitempty"`
	// Mismatch, when set, says why the sandbox only ends: a daemon of
	// another agent protocol made it (after an upgrade).
	Mismatch string   `json:"mismatch,omitempty"`
	Limits   Limits   `json:"limits"`
	Layers   []string `json:"layers,omitempty"`
	// FromPool says the create was served by a warm pool.
	FromPool bool `json:"from_pool,omitempty"`
	// DriverRule says, in a create's answer, what chose the driver:
	// "tier:NAME" (the daemon's policy), "request" or "template".
	DriverRule   string `json:"driver_rule,omitempty"`
	DriverReason string `json:"driver_reason,omitempty"`
	// Checkpoints is how many per-command checkpoints it keeps; Steps is
	// the number of the last one.
	Checkpoints int   `json:"checkpoints,omitempty"`
	Steps       int64 `json:"steps,omitempty"`
	// Paused is set while it is paused.
	Paused *Paused `json:"paused,omitempty"`
	// OnTimeout is "pause" when its TTL pauses it; AutoResume, when a
	// call that needs it running resumes it.
	OnTimeout  string `json:"on_timeout,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
	// Pull is set while its create waits for its image to be pulled
	// (state creating): layer Layer of Layers is being fetched, Bytes
	// compressed bytes have come.
	Pull *Pull `json:"pull,omitempty"`
}

// Pull is the pull of an image a create waits for.
type Pull struct {
	Image  string `json:"image"`
	Layer  int    `json:"layer"`
	Layers int    `json:"layers"`
	Bytes  int64  `json:"bytes"`
}

// CreateSandbox makes a sandbox (or claims a ready one from the
// template's pool).
func (c *Client) CreateSandbox(ctx context.Context, req CreateRequest) (*Sandbox, error) {
	body := struct {
		CreateRequest
		TTLSeconds         int64 `json:"ttl_seconds,omitempty"`
		IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	}{req, ceilSeconds(req.TTL), ceilSeconds(req.IdleTimeout)}
	var sb Sandbox
	return &sb, c.call(ctx, request{method: "POST", path: "/v1/sandboxes", json: body}, &sb)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// GetSandbox describes sandbox id, live or ended.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.call(ctx, request{method: "GET", path: sandboxPath(id)}, &sb)
}

// ListOptions filter ListSandboxes; empty fields match all.
type ListOptions struct {
	State    string
	Template string
}

// ListSandboxes lists this key's sandboxes (an operator's: all).
func (c *Client) ListSandboxes(ctx context.Context, o ListOptions) ([]Sandbox, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Template != "" {
		q.Set("template", o.Template)
	}
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	err := c.call(ctx, request{method: "GET", path: "/v1/sandboxes", query: q}, &out)
	return out.Sandboxes, err
}

// DeleteSandbox destroys sandbox id. Deleting an ended sandbox is no error.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.call(ctx, request{method: "DELETE", path: sandboxPath(id)}, nil)
}

// SetTimeout makes sandbox id live for ttl from now.
func (c *Client) SetTimeout(ctx context.Context, id string, ttl time.Duration) (*Sandbox, error) {
	var sb Sandbox
	body := map[string]int64{"ttl_seconds": ceilSeconds(ttl)}
	return &sb, c.call(ctx, request{method: "POST", path: sandboxPath(id, "timeout"), json: body}, &sb)
}

// SandboxUsage is what a whole sandbox uses now, as the host counts it.
type SandboxUsage struct {
	// MemoryBytes is the memory in use now; MemoryLimitBytes its limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// CPUMS is the CPU time used since it started; CPUs its limit in cores.
	CPUMS int64   `json:"cpu_ms"`
	CPUs  float64 `json:"cpus"`
	// CPUUsedCores is the CPU time it used per second over CPUWindowMS
	// (1.0: one core busy).
	CPUUsedCores float64 `json:"cpu_used_cores"`
	CPUWindowMS  int64   `json:"cpu_window_ms"`
	// At is when the counters were read.
	At time.Time `json:"at"`
}

// SandboxUsage reads what sandbox id uses now. A daemon whose driver
// cannot read it answers 501 (an *Error with Code "unsupported").
func (c *Client) SandboxUsage(ctx context.Context, id string) (*SandboxUsage, error) {
	var u SandboxUsage
	return &u, c.call(ctx, request{method: "GET", path: sandboxPath(id, "usage")}, &u)
}

// Key is an API key; Secret is set only when it was just created.
type Key struct {
	ID    string     `json:"id"`
	Name  string     `json:"name,omitempty"`
	Role  string     `json:"role"`
	Quota Quota      `json:"quota"`
	Rate  RateLimits `json:"rate"`
	// Labels are what the daemon's policy reads of the key ("trust").
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	// CreatedBy is the key that made this one (empty: made offline).
	CreatedBy string `json:"created_by,omitempty"`
	Secret    string `json:"secret,omitempty"`
}

// Quota bounds what a key holds at once; zero fields mean the daemon's defaults.
type Quota struct {
	MaxSandboxes   int   `json:"max_sandboxes,omitempty"`
	MaxMemoryBytes int64 `json:"max_memory_bytes,omitempty"`
	// MaxSnapshots, MaxSnapshotBytes and MaxSnapshotFiles bound the
	// key's snapshots: their number, their content (each distinct content
	// once) and the entries of one.
	MaxSnapshots     int   `json:"max_snapshots,omitempty"`
	MaxSnapshotBytes int64 `json:"max_snapshot_bytes,omitempty"`
	MaxSnapshotFiles int   `json:"max_snapshot_files,omitempty"`
}

// RateLimits bound how fast a key acts; zero fields mean the defaults.
type RateLimits struct {
	CreatesPerSecond float64 `json:"creates_per_second,omitempty"`
	CreateBurst      int     `json:"create_burst,omitempty"`
	ExecsPerSecond   float64 `json:"execs_per_second,omitempty"`
	ExecBurst        int     `json:"exec_burst,omitempty"`
	FilesPerSecond   float64 `json:"files_per_second,omitempty"`
	FileBurst        int     `json:"file_burst,omitempty"`
	// MaxInFlight bounds the calls that move data or wait running at once.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// CreateKeyRequest asks for a key. Role is "agent" (default) or "operator".
type CreateKeyRequest struct {
	Name  string     `json:"name,omitempty"`
	Role  string     `json:"role,omitempty"`
	Quota Quota      `json:"quota,omitzero"`
	Rate  RateLimits `json:"rate,omitzero"`
	// Labels are read by the daemon's policy rules and tiers.
	Labels map[string]string `json:"labels,omitempty"`
	// Format is how the secret is written: "airlock" (default) or "e2b"
	// (e2b_ and hex digits, the form the E2B SDKs accept).
	Format string `json:"format,omitempty"`
}

// CreateKey makes a key (operators only). The answer holds its secret,
// which the daemon never shows again.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (*Key, error) {
	var k Key
	return &k, c.call(ctx, request{method: "POST", path: "/v1/keys", json: req}, &k)
}

// ListKeys lists the keys (operators only).
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out struct {
		Keys []Key `json:"keys"`
	}
	err := c.call(ctx, request{method: "GET", path: "/v1/keys"}, &out)
	return out.Keys, err
}

// DeleteKey revokes key id (operators only).
func (c *Client) DeleteKey(ctx context.Context, id string) error {
	return c.call(ctx, request{method: "DELETE", path: "/v1/keys/" + url.PathEscape(id)}, nil)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
