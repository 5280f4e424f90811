package bench

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/runsc"
)

// runscPrefix runs a command in bare gVisor with the runsc and platform
// the gvisor driver uses, so the two rows compare like with like.
func runscPrefix() []string {
	r, err := runsc.Find(context.Background())
	if err != nil || len(r.Platforms) == 0 {
		return runscArgs
	}
	return []string{r.Path, "--network=none", "--platform=" + r.Platforms[0], "do"}
}

// runscVersion names the runsc the gvisor rows use: the pinned build's
// version, or what runsc on PATH says.
func runscVersion(ctx context.Context) string {
	r, err := runsc.Find(ctx)
	if err != nil {
		return ""
	}
	if len(r.Platforms) > 0 {
		return r.Version + ", " + r.Platforms[0]
	}
	return r.Version
}
