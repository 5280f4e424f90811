package api

import (
	"errors"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Copy-on-write mounts' pending changes (docs/cow-api.md): list, apply,
// discard; and every sandbox's, for operators.

// ChangesResponse is the answer of GET /v1/sandboxes/{id}/changes.
type ChangesResponse struct {
	Mounts []supervisor.CowMount `json:"mounts"`
}

// PendingChangesResponse is the answer of GET /v1/changes.
type PendingChangesResponse struct {
	Changes []supervisor.PendingChange `json:"changes"`
}

// conflictBody is the answer of an apply the host's changes refused.
type conflictBody struct {
	errorBody
	Target    string        `json:"target"`
	Conflicts []cow.Refusal `json:"conflicts"`
}

func (s *Server) listChanges(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	mounts, err := s.sup.Changes(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ChangesResponse{Mounts: mounts})
	return nil
}

func (s *Server) applyChanges(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body supervisor.CowRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	res, err := s.sup.ApplyChanges(r.Context(), c.sup, id, body)
	var ce *cow.ConflictError
	if errors.As(err, &ce) {
		var b conflictBody
		b.Error.Code, b.Error.Message = "conflict", ce.Error()
		b.Target, b.Conflicts = ce.Target, ce.Conflicts
		writeJSON(w, http.StatusConflict, b)
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) discardChanges(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body supervisor.CowRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	res, err := s.sup.DiscardChanges(r.Context(), c.sup, id, body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) pendingChanges(w http.ResponseWriter, r *http.Request, c *caller) error {
	list, err := s.sup.PendingChanges(r.Context(), c.sup)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, PendingChangesResponse{Changes: list})
	return nil
}
