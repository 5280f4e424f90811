package api

import (
	"math"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Limits is the wire form of sandbox.Limits: durations in milliseconds.
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

func (l Limits) limits() (sandbox.Limits, error) {
	t, err := millis("timeout_ms", l.TimeoutMS)
	if err != nil {
		return sandbox.Limits{}, err
	}
	ct, err := millis("cpu_time_ms", l.CPUTimeMS)
	if err != nil {
		return sandbox.Limits{}, err
	}
	return sandbox.Limits{
		MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids, Timeout: t, CPUTime: ct,
		DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes, OutputBytes: l.OutputBytes, OpenFiles: l.OpenFiles,
	}, nil
}

func wireLimits(l sandbox.Limits) Limits {
	return Limits{
		MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids,
		TimeoutMS: l.Timeout.Milliseconds(), CPUTimeMS: l.CPUTime.Milliseconds(),
		DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes, OutputBytes: l.OutputBytes, OpenFiles: l.OpenFiles,
	}
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template string `json:"template,omitempty"`
	// Driver names the driver; absent means the template's, or the one
	// the policy's tiers choose. A named driver is kept or the create is
	// refused, never changed.
	Driver             string            `json:"driver,omitempty"`
	Limits             Limits            `json:"limits,omitzero"`
	Env                map[string]string `json:"env,omitempty"`
	TTLSeconds         int64             `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty"`
	// Network asks for network mode egress and its rules, within the
	// template's; absent means the template's network.
	Network *sandbox.Network `json:"network,omitempty"`
	// Checkpoints keeps a snapshot of /workspace before each of the last
	// this many execs (0 to 64): "what did step 7 change?" and "undo the
	// last three steps" then are one call each.
	Checkpoints int `json:"checkpoints,omitempty"`
	// Mounts are host paths to show inside, each named by the policy's
	// mounts allowlist: {"source", "target", "writable"} or with
	// "cow": true (copy-on-write, see docs/cow-api.md).
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
	// OnTimeout "pause" pauses the sandbox at its TTL instead of ending
	// it (a driver that can pause); AutoResume then has a call that needs
	// it running resume it first.
	OnTimeout  string `json:"on_timeout,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
}

// request checks the body and turns it into the supervisor's request.
func (b CreateSandboxRequest) request() (supervisor.CreateRequest, error) {
	var req supervisor.CreateRequest
	var err error
	if b.Template != "" && !sandbox.ValidID(b.Template) {
		return req, badRequest("template %q: names are lower-case letters, digits, '-' and '_'", truncate(b.Template, 80))
	}
	req.Template = b.Template
	if b.Driver != "" && !sandbox.ValidID(b.Driver) {
		return req, badRequest("driver %q: names are lower-case letters, digits, '-' and '_'", truncate(b.Driver, 80))
	}
	req.Driver = b.Driver
	if req.Limits, err = b.Limits.limits(); err != nil {
		return req, err
	}
	if req.Env, err = envList(b.Env); err != nil {
		return req, err
	}
	if req.TTL, err = seconds("ttl_seconds", b.TTLSeconds); err != nil {
		return req, err
	}
	if req.IdleTimeout, err = seconds("idle_timeout_seconds", b.IdleTimeoutSeconds); err != nil {
		return req, err
	}
	if b.Network != nil {
		req.Network = *b.Network
	}
	req.Checkpoints = b.Checkpoints
	if len(b.Mounts) > 16 {
		return req, badRequest("mounts: at most 16")
	}
	req.Mounts = b.Mounts
	req.OnTimeout, req.AutoResume = b.OnTimeout, b.AutoResume
	return req, nil
}

// Sandbox is the wire form of a sandbox.
type Sandbox struct {
	ID                 string      `json:"id"`
	Template           string      `json:"template"`
	Driver             string      `json:"driver"`
	State              store.State `json:"state"`
	Owner              string      `json:"owner,omitempty"`
	CreatedAt          time.Time   `json:"created_at"`
	ExpiresAt          time.Time   `json:"expires_at,omitzero"`
	IdleTimeoutSeconds int64       `json:"idle_timeout_seconds,omitempty"`
	LastActiveAt       time.Time   `json:"last_active_at,omitzero"`
	EndedAt            time.Time   `json:"ended_at,omitzero"`
	EndReason          string      `json:"end_reason,omitempty"`
	EndMessage         string      `json:"end_message,omitempty"`
	// AgentProtocol is the protocol version of the sandbox's agent (0 or
	// absent: no agent, or not known).
	AgentProtocol int `json:"agent_protocol,omitempty"`
	// Mismatch, when set, says why the sandbox only ends: a daemon of
	// another agent protocol made it (see docs/daemon.md).
	Mismatch string          `json:"mismatch,omitempty"`
	Limits   Limits          `json:"limits"`
	Layers   []sandbox.Layer `json:"layers,omitempty"`
	FromPool bool            `json:"from_pool,omitempty"`
	// DriverRule and DriverReason say, in a create's answer, what chose
	// the driver: "tier:NAME" (the policy), "request" or "template".
	DriverRule   string `json:"driver_rule,omitempty"`
	DriverReason string `json:"driver_reason,omitempty"`
	// Checkpoints is how many per-exec checkpoints it keeps; Steps is the
	// number of the last one.
	Checkpoints int   `json:"checkpoints,omitempty"`
	Steps       int64 `json:"steps,omitempty"`
	// Paused is set while it is paused (state paused).
	Paused *Paused `json:"paused,omitempty"`
	// OnTimeout is "pause" when its TTL pauses it; AutoResume, when a
	// call that needs it running resumes it.
	OnTimeout  string `json:"on_timeout,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
	// Pull is set while its create waits for its image to be pulled
	// (state creating): how far the pull is.
	Pull *Pull `json:"pull,omitempty"`
}

// Pull is the pull of an image a create waits for: layer Layer of Layers
// is being fetched, Bytes compressed bytes have come so far.
type Pull struct {
	Image  string `json:"image"`
	Layer  int    `json:"layer"`
	Layers int    `json:"layers"`
	Bytes  int64  `json:"bytes"`
}

func wirePull(p *supervisor.ImagePull) *Pull {
	if p == nil {
		return nil
	}
	return &Pull{Image: p.Image, Layer: p.Layer, Layers: p.Layers, Bytes: p.Bytes}
}

func wireSandbox(in supervisor.Info) Sandbox {
	s := Sandbox{
		ID: in.ID, Template: in.Template, Driver: in.Driver, State: in.State, Owner: in.Owner,
		CreatedAt: in.Created, ExpiresAt: in.ExpiresAt, IdleTimeoutSeconds: int64(in.IdleTimeout / time.Second),
		LastActiveAt: in.LastActive, EndedAt: in.Ended, EndReason: in.EndReason, EndMessage: in.EndMessage,
		AgentProtocol: in.AgentProtocol, Mismatch: in.Mismatch,
		Limits: wireLimits(in.Limits), Layers: in.Layers, FromPool: in.FromPool,
		DriverRule: in.DriverRule, DriverReason: in.DriverReason, Checkpoints: in.Checkpoints, Steps: in.Steps,
		Paused: wirePaused(in.Paused), Pull: wirePull(in.Pull),
	}
	if lc := in.Lifecycle; lc != nil {
		s.OnTimeout, s.AutoResume = lc.OnTimeout, lc.AutoResume
	}
	return s
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body CreateSandboxRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	info, err := s.sup.Create(r.Context(), c.sup, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wireSandbox(info))
	return nil
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	f := supervisor.Filter{State: store.State(q.Get("state")), Template: q.Get("template")}
	switch f.State {
	case "", store.StateCreating, store.StatePooled, store.StateRunning, store.StatePaused, store.StateDestroyed, store.StateLost:
	default:
		return badRequest("state %q: use creating, pooled, running, paused, destroyed or lost", truncate(string(f.State), 40))
	}
	infos, err := s.sup.List(r.Context(), c.sup, f)
	if err != nil {
		return err
	}
	out := SandboxList{Sandboxes: make([]Sandbox, 0, len(infos))}
	for _, in := range infos {
		out.Sandboxes = append(out.Sandboxes, wireSandbox(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	info, err := s.sup.Get(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireSandbox(info))
	return nil
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	if err := s.sup.Kill(r.Context(), c.sup, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout.
type TimeoutRequest struct {
	// TTLSeconds is the new lifetime, counted from now.
	TTLSeconds int64 `json:"ttl_seconds"`
}

func (s *Server) extendTimeout(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body TimeoutRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	d, err := seconds("ttl_seconds", body.TTLSeconds)
	if err != nil {
		return err
	}
	info, err := s.sup.ExtendTimeout(r.Context(), c.sup, id, d)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireSandbox(info))
	return nil
}

// SandboxUsage is the body of GET /v1/sandboxes/{id}/usage: what the whole
// sandbox uses now, as the host counts it.
type SandboxUsage struct {
	// MemoryBytes is the memory in use now (its tmpfs files included where
	// the host counts them); MemoryLimitBytes its limit.
	MemoryBytes      int64 `json:"memory_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// CPUMS is the CPU time used since it started; CPUs its CPU limit in
	// cores.
	CPUMS int64   `json:"cpu_ms"`
	CPUs  float64 `json:"cpus"`
	// CPUUsedCores is the CPU it used per second over the last
	// CPUWindowMS milliseconds (1.0: one core busy): since the previous
	// reading at least a second earlier, or since it started.
	CPUUsedCores float64 `json:"cpu_used_cores"`
	CPUWindowMS  int64   `json:"cpu_window_ms"`
	// At is when the counters were read.
	At time.Time `json:"at"`
}

func wireUsage(u supervisor.Usage) SandboxUsage {
	return SandboxUsage{
		MemoryBytes: u.MemoryBytes, MemoryLimitBytes: u.MemoryLimitBytes, CPUMS: u.CPUMS, CPUs: u.CPUs,
		CPUUsedCores: math.Round(u.CPUCores*1000) / 1000, CPUWindowMS: u.Window.Milliseconds(), At: u.At.UTC(),
	}
}

// sandboxUsage answers GET /v1/sandboxes/{id}/usage; 501 where the
// sandbox's driver cannot read its counters.
func (s *Server) sandboxUsage(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	u, err := s.sup.Usage(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireUsage(u))
	return nil
}
