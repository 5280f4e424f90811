package native

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Pause of a native sandbox is a freeze of its workload's cgroup (v1's
// freezer, v2's cgroup.freeze): every command stops where it is, its
// memory stays the host's (Capabilities.MemoryKeptInHost); the agent, in
// a cgroup of its own, answers on, so a daemon restarted meanwhile
// reattaches as usual. See docs/decisions.md (56) for why not CRIU.

var _ agentdriver.HostFreezer = (*host)(nil)

// freezeTimeout bounds the wait for every command to stop.
const freezeTimeout = 10 * time.Second

// Freeze freezes the sandbox's workload cgroup.
func (h *host) Freeze(context.Context) error {
	if h.workload == nil {
		return fmt.Errorf("freeze sandbox %s: %w: it has no cgroup", h.spec.ID, sandbox.ErrUnsupported)
	}
	if err := h.workload.Freeze(freezeTimeout); err != nil {
		h.workload.Thaw()
		return fmt.Errorf("freeze sandbox %s: %w", h.spec.ID, err)
	}
	return nil
}

// Thaw lets the workload's commands run again.
func (h *host) Thaw(context.Context) error {
	if h.workload == nil {
		return fmt.Errorf("thaw sandbox %s: %w: it has no cgroup", h.spec.ID, sandbox.ErrUnsupported)
	}
	h.workload.Thaw()
	return nil
}
