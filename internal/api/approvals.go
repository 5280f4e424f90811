package api

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// ApprovalList is the answer of GET /v1/approvals: pending approvals
// (oldest first), then recently decided ones (newest first).
type ApprovalList struct {
	Approvals []supervisor.Approval `json:"approvals"`
}

// DecideApprovalRequest is the body of POST /v1/approvals/{id}.
type DecideApprovalRequest struct {
	// Decision is "approve" or "deny".
	Decision string `json:"decision"`
	// Reason is told to the agent and recorded in the audit log.
	Reason string `json:"reason,omitempty"`
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, c *caller) error {
	list, err := s.sup.Approvals(r.Context(), c.sup)
	if err != nil {
		return err
	}
	if list == nil {
		list = []supervisor.Approval{}
	}
	writeJSON(w, http.StatusOK, ApprovalList{Approvals: list})
	return nil
}

func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, c *caller) error {
	var b DecideApprovalRequest
	if err := decodeJSON(w, r, &b); err != nil {
		return err
	}
	a, err := s.decideApprovalAs(r, c, r.PathValue("id"), b)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (s *Server) decideApprovalAs(r *http.Request, c *caller, id string, b DecideApprovalRequest) (supervisor.Approval, error) {
	if b.Decision != "approve" && b.Decision != "deny" {
		return supervisor.Approval{}, badRequest("decision %q: use \"approve\" or \"deny\"", truncate(b.Decision, 40))
	}
	if len(b.Reason) > 1000 {
		return supervisor.Approval{}, badRequest("reason: at most 1000 bytes")
	}
	return s.sup.DecideApproval(r.Context(), c.sup, truncate(id, 100), b.Decision == "approve", b.Reason)
}
