package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// reportDiscardedCow tells the user of a one-shot run that what its
// sandbox changed in copy-on-write mounts goes with it.
func reportDiscardedCow(ctx context.Context, sb sandbox.Instance, stderr io.Writer) {
	cm, ok := sb.(sandbox.CowMounter)
	if !ok {
		return
	}
	for _, l := range cm.CowLayers() {
		n, err := cow.Count(ctx, l.Dir)
		if err != nil || n == 0 {
			continue
		}
		fmt.Fprintf(stderr, "airlock: the cow mount %s holds %d change(s) to %s, discarded with this one-shot sandbox: to review and apply them, run the work in a daemon's sandbox (airlock sandbox create --mount %s:%s:cow, then airlock sandbox changes)\n",
			l.Target, n, l.Source, l.Source, l.Target)
	}
}
