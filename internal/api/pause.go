package api

import (
	"context"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Paused describes a paused sandbox (Sandbox.Paused).
type Paused struct {
	// PausedAt is when it was paused; ExpiresAt when its paused TTL ends
	// it.
	PausedAt  time.Time `json:"paused_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// MemoryKeptInHost: it is frozen where it is, its memory the host's
	// still (nothing on disk).
	MemoryKeptInHost bool `json:"memory_kept_in_host"`
	// StoredBytes is the size of its pause image on the daemon's disk.
	StoredBytes int64 `json:"stored_bytes"`
}

func wirePaused(p *store.Paused) *Paused {
	if p == nil {
		return nil
	}
	return &Paused{PausedAt: p.At, ExpiresAt: p.Until, MemoryKeptInHost: p.MemoryKept, StoredBytes: p.Bytes}
}

// pauseSandbox is POST /v1/sandboxes/{id}/pause.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.pauseOrResume(w, r, c, s.sup.Pause)
}

// resumeSandbox is POST /v1/sandboxes/{id}/resume.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	return s.pauseOrResume(w, r, c, s.sup.Resume)
}

func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, c *caller, do func(context.Context, supervisor.Caller, string) (supervisor.Info, error)) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	info, err := do(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireSandbox(info))
	return nil
}
