package api

import (
	"net/http"
)

// egressSummary answers GET /v1/sandboxes/{id}/egress: what the sandbox did
// through the egress proxy (requests by host and decision, bytes).
func (s *Server) egressSummary(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	sum, err := s.sup.Egress(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sum)
	return nil
}
