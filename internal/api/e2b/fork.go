package e2b

import (
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Sandbox.fork (e2b 2.35 and later): POST /sandboxes/{id}/fork copies
// the running sandbox, its processes and memory, into count new running
// ones (airlock's live fork); the source runs on with its id and
// expiry. E2B reports each fork's outcome on its own; airlock starts all
// of them or none, so a 201 lists only sandboxes.

// forkBody is E2B's SandboxForkRequest.
type forkBody struct {
	Count   *int   `json:"count"`
	Timeout *int64 `json:"timeout"`
}

// forkResult is E2B's SandboxForkResult: here always a sandbox.
type forkResult struct {
	Sandbox sandboxJSON `json:"sandbox"`
}

func (h *Handler) fork(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body forkBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	src, err := h.live(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	req := supervisor.LiveForkRequest{Sandbox: src.ID}
	if body.Count != nil {
		if *body.Count < 1 || *body.Count > supervisor.MaxLiveForks {
			return errorf(http.StatusBadRequest, "count %d: fork into 1 to %d sandboxes", *body.Count, supervisor.MaxLiveForks)
		}
		req.Count = *body.Count
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if *body.Timeout > int64(365*24*time.Hour/time.Second) {
			return errorf(http.StatusBadRequest, "timeout %d: give seconds, at most a year", *body.Timeout)
		}
		req.TTL = time.Duration(*body.Timeout) * time.Second
	}
	res, err := h.sup.LiveFork(r.Context(), c.sup, req)
	if err != nil {
		return err
	}
	out := make([]forkResult, 0, len(res.Sandboxes))
	for _, in := range res.Sandboxes {
		// Each clone gets its own envd token, private like its source's.
		tok := newToken()
		if strings.HasPrefix(src.Token, privatePrefix) {
			tok = privatePrefix + tok
		}
		if in.Token, err = h.sup.EnsureToken(r.Context(), c.sup, in.ID, tok); err != nil {
			return err
		}
		out = append(out, forkResult{Sandbox: h.wireSandbox(in)})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}
