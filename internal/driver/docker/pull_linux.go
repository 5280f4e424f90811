package docker

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/moby/moby/client"
)

// pull has the engine pull ref (for linux on this host's architecture),
// from the registry its reference names, as `docker pull` would: the
// engine's own configuration says which registries it trusts. Its
// progress goes to the log, a line per layer done.
func (d *Driver) pull(ctx context.Context, ref string) error {
	d.rc.Logger.Info("the engine pulls an image it does not have", "image", ref)
	if d.opts.Progress != nil {
		fmt.Fprintf(d.opts.Progress, "pulling %s (the engine at %s does not have it)\n", ref, d.cli.DaemonHost())
	}
	resp, err := d.cli.ImagePull(ctx, ref, client.ImagePullOptions{
		Platforms: []ocispec.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
	})
	if err != nil {
		return err
	}
	defer resp.Close()
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if m.Error != nil {
			return fmt.Errorf("%s", m.Error.Message)
		}
		if m.Status == "Pull complete" || m.Status == "Already exists" {
			d.rc.Logger.Info("image pull", "image", ref, "layer", m.ID, "status", m.Status)
			if d.opts.Progress != nil {
				fmt.Fprintf(d.opts.Progress, "layer %s: %s\n", m.ID, strings.ToLower(m.Status))
			}
		}
	}
	return nil
}
