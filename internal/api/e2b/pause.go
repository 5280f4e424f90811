package e2b

import (
	"context"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Pause and resume as E2B's SDKs call them: `sandbox.pause()` (and
// `betaPause()`) is POST /sandboxes/{id}/pause, 204, 409 when it is paused
// already; `Sandbox.connect(id)` resumes a paused sandbox (201) and
// answers a running one (200); the older POST /sandboxes/{id}/resume
// resumes (201), 409 when it runs. Lists and gets say state "paused".

// liveOrPaused is sandbox id when it runs or is paused; anything else is
// not found, as E2B keeps no ended sandbox.
func (h *Handler) liveOrPaused(ctx context.Context, c *caller, id string) (supervisor.Info, error) {
	if !sandbox.ValidID(id) {
		return supervisor.Info{}, errorf(http.StatusNotFound, "sandbox %q not found", truncate(id, 80))
	}
	info, err := h.sup.Get(ctx, c.sup, id)
	if err != nil {
		return info, err
	}
	if info.State != store.StateRunning && info.State != store.StatePaused {
		return info, errorf(http.StatusNotFound, "sandbox %s not found: it is %s (%s)", id, info.State, info.EndReason)
	}
	return info, nil
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c *caller) error {
	info, err := h.liveOrPaused(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if info.State == store.StatePaused {
		return errorf(http.StatusConflict, "sandbox %s is already paused", info.ID)
	}
	if _, err := h.sup.Pause(r.Context(), c.sup, info.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request, c *caller) error {
	var body timeoutBody
	if err := decode(w, r, &body); err != nil {
		return err
	}
	info, err := h.liveOrPaused(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	if info.State != store.StatePaused {
		return errorf(http.StatusConflict, "sandbox %s is already running", info.ID)
	}
	info, err = h.resumed(r.Context(), c, info, body)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, h.wireSandbox(info))
	return nil
}

// resumed resumes paused sandbox info, lengthens it to body's timeout and
// gives it a token where it has none.
func (h *Handler) resumed(ctx context.Context, c *caller, info supervisor.Info, body timeoutBody) (supervisor.Info, error) {
	info, err := h.sup.Resume(ctx, c.sup, info.ID)
	if err != nil {
		return info, err
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if info, err = h.lengthen(ctx, c, info, *body.Timeout); err != nil {
			return info, err
		}
	}
	if info.Token == "" {
		if info.Token, err = h.sup.EnsureToken(ctx, c.sup, info.ID, newToken()); err != nil {
			return info, err
		}
	}
	return info, nil
}

// e2bState is a sandbox's state in E2B's words.
func e2bState(s store.State) string {
	if s == store.StatePaused {
		return "paused"
	}
	return "running"
}
