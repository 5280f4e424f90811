package api

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// LiveForkRequest is the body of POST /v1/sandboxes/{id}/fork: Live must
// be true (a fork of a sandbox's files goes through a snapshot: POST
// /v1/snapshots/{snap}/fork).
type LiveForkRequest struct {
	Live bool `json:"live"`
	// Count is how many clones, 1 (the default) to 16.
	Count      int               `json:"count,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

// LiveForkResponse are the clones, running.
type LiveForkResponse struct {
	Source    string    `json:"source"`
	Sandboxes []Sandbox `json:"sandboxes"`
	// ImageBytes is the size of the image the clones started from;
	// CheckpointMS how long the source's save took.
	ImageBytes   int64 `json:"image_bytes"`
	CheckpointMS int64 `json:"checkpoint_ms"`
}

// forkSandbox is POST /v1/sandboxes/{id}/fork.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body LiveForkRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if !body.Live {
		return badRequest("live must be true: a fork of a sandbox's files goes through a snapshot (POST /v1/sandboxes/%s/snapshots, then POST /v1/snapshots/{snap}/fork)", id)
	}
	req := supervisor.LiveForkRequest{Sandbox: id, Count: body.Count, Metadata: body.Metadata}
	if req.TTL, err = seconds("ttl_seconds", body.TTLSeconds); err != nil {
		return err
	}
	res, err := s.sup.LiveFork(r.Context(), c.sup, req)
	if err != nil {
		return err
	}
	out := LiveForkResponse{Source: res.Source, ImageBytes: res.ImageBytes, CheckpointMS: res.Checkpoint.Milliseconds(), Sandboxes: []Sandbox{}}
	for _, in := range res.Sandboxes {
		out.Sandboxes = append(out.Sandboxes, wireSandbox(in))
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
