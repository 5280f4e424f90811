package e2b

import (
	"context"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// E2B's lifecycle at create: `lifecycle: {onTimeout: 'pause', autoResume}`
// is sent as autoPause (and autoPauseMemory, onTimeout's keepMemory) and
// autoResume {enabled}. A sandbox made with autoPause is paused at its
// timeout, not killed (supervisor/lifecycle.go); with autoResume, a
// request for it (envd, the code interpreter, a port) resumes it first.
// Without autoResume such a request is answered 502, as for any sandbox
// that does not run, and Sandbox.connect resumes it.

// lifecycleJSON is a sandbox's lifecycle in E2B's get.
type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// lifecycle puts b's lifecycle into req.
func (b newSandbox) lifecycle(req *supervisor.CreateRequest) error {
	pause := b.AutoPause != nil && *b.AutoPause
	resume := b.AutoResume != nil && b.AutoResume.Enabled
	switch {
	case resume && !pause:
		return errorf(http.StatusBadRequest, "autoResume can only be true when lifecycle.onTimeout is 'pause'")
	case pause && b.AutoPauseMemory != nil && !*b.AutoPauseMemory:
		return errorf(http.StatusBadRequest, "airlock's pause keeps a sandbox's memory and processes: leave onTimeout.keepMemory out or true")
	}
	if pause {
		req.OnTimeout, req.AutoResume = supervisor.OnTimeoutPause, resume
	}
	return nil
}

// wireLifecycle is in's lifecycle in E2B's words.
func wireLifecycle(in supervisor.Info) *lifecycleJSON {
	if in.Lifecycle != nil && in.Lifecycle.OnTimeout == supervisor.OnTimeoutPause {
		return &lifecycleJSON{OnTimeout: "pause", AutoResume: in.Lifecycle.AutoResume}
	}
	return &lifecycleJSON{OnTimeout: "kill"}
}

// woken is paused sandbox info resumed for a request that needs it
// running, when it was made with autoResume; info as it is otherwise.
func (h *Handler) woken(ctx context.Context, info supervisor.Info) (supervisor.Info, error) {
	if info.State != store.StatePaused || info.Lifecycle == nil || !info.Lifecycle.AutoResume {
		return info, nil
	}
	c, err := h.ownerCaller(info)
	if err != nil {
		return info, err
	}
	return h.sup.Resume(ctx, c.sup, info.ID)
}
