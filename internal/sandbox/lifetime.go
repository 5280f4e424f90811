package sandbox

import (
	"context"
	"time"
)

// LifetimeSetter is an instance whose holder (its agent) ends it by
// itself once its lifetime has run out while nobody is attached: a sandbox
// that outlives its daemon never outlives its time to live. The daemon
// tells it the lifetime at create, at reattach and whenever its TTL or
// idle timeout changes. The daemon's own enforcement goes first; the
// holder's is the backstop for a daemon that is gone.
type LifetimeSetter interface {
	// SetLifetime sets what is left of the sandbox's time to live to left
	// (zero: no time to live) and its idle timeout to idle (zero: none),
	// of which idleFor has passed.
	SetLifetime(ctx context.Context, left, idle, idleFor time.Duration) error
}
