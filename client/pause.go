package client

import (
	"context"
	"time"
)

// Paused describes a paused sandbox (Sandbox.Paused).
type Paused struct {
	// PausedAt is when it was paused; ExpiresAt when its paused TTL ends
	// it (its TTL and idle timeout wait while it is paused).
	PausedAt  time.Time `json:"paused_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// MemoryKeptInHost: it is frozen where it is, its memory the host's
	// still.
	MemoryKeptInHost bool `json:"memory_kept_in_host"`
	// StoredBytes is the size of its pause image on the daemon's disk.
	StoredBytes int64 `json:"stored_bytes"`
}

// PauseSandbox pauses sandbox id: its processes and memory are saved to
// the daemon's disk (or frozen where its driver can only do that) and it
// stops using CPU. A driver without pause answers an *Error with code
// "unsupported" that says why.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.call(ctx, request{method: "POST", path: sandboxPath(id, "pause")}, &sb)
}

// ResumeSandbox brings paused sandbox id back where it stopped; a running
// one is answered as it is.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var sb Sandbox
	return &sb, c.call(ctx, request{method: "POST", path: sandboxPath(id, "resume")}, &sb)
}
