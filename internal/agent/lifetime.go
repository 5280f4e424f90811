package agent

import (
	"context"
	"time"

	"connectrpc.com/connect"
)

// ProcLifetime tells the agent of a sandbox that outlives its host
// sessions how long it may live (LifetimeRequest).
const ProcLifetime = service + "Lifetime"

// LifetimeRequest is the sandbox's lifetime as the host last set it: at
// create, at every reattach, and whenever its time to live or idle timeout
// changes. The agent ends the sandbox itself once that lifetime has run
// out while no host session is attached (LifetimeGrace after it), so that
// a sandbox never outlives its time to live whether or not its daemon
// comes back. Durations, not instants: a guest's clock need not be the
// host's.
type LifetimeRequest struct {
	// RemainingMS is what is left of the sandbox's time to live, in
	// milliseconds; 0: no time to live.
	RemainingMS int64 `json:"remaining_ms,omitempty"`
	// IdleMS is the idle timeout: with no host attached and no command
	// running, the sandbox ends this long after the host last used it.
	// 0: none.
	IdleMS int64 `json:"idle_ms,omitempty"`
	// IdleForMS is how long the host has seen the sandbox unused when it
	// sends this.
	IdleForMS int64 `json:"idle_for_ms,omitempty"`
}

// LifetimeGrace is how long past its lifetime a sandbox with no host
// attached runs before its agent ends it: a daemon that is attached, or
// comes back meanwhile, ends it first with its own record and audit
// event.
const LifetimeGrace = 2 * time.Second

// AttachedGrace is how long past its time to live a sandbox whose host
// session is open runs before its agent ends it anyway. A live daemon ends
// it within a second of its TTL (its reap interval) or tells the agent
// the TTL it extended: this is for a daemon that hangs, and for one that
// is gone without its session's end reaching the agent (a container
// engine keeps a persistent container's standard input open when its
// attached client dies).
const AttachedGrace = 10 * time.Second

// SetLifetime tells the agent the sandbox's lifetime (LifetimeRequest). An
// agent that predates the call answers that it does not know it: the
// sandbox then lives until its host ends it, as before.
func (c *Client) SetLifetime(ctx context.Context, req LifetimeRequest) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := c.lifetime.get().CallUnary(ctx, connect.NewRequest(&req))
	if connect.CodeOf(err) == connect.CodeUnimplemented || connect.CodeOf(err) == connect.CodeNotFound {
		return nil
	}
	return callError(ctx, "set the sandbox's lifetime", err)
}
