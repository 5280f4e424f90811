package bench

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// runscPrefix runs a command in bare gVisor with the runsc and platform
// the gvisor driver uses, so the two rows compare like with like.
func runscPrefix() []string {
	r, err := hostcap.FindRunsc(context.Background())
	if err != nil || len(r.Platforms) == 0 {
		return runscArgs
	}
	return []string{r.Path, "--network=none", "--platform=" + r.Platforms[0], "do"}
}
