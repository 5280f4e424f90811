package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

// pull has the engine pull ref (for linux on this host's architecture),
// from the registry its reference names, as `docker pull` would: the
// engine's own configuration says which registries it trusts. Its
// progress goes to Options.Progress as airlock's own pull shows it
// (image.Printer: layers and bytes, redrawn on a terminal), and to the
// log, a line per layer done.
func (d *Driver) pull(ctx context.Context, ref string) error {
	d.rc.Logger.Info("the engine pulls an image it does not have", "image", ref, "engine", d.cli.DaemonHost())
	show := progressOf(d.opts.Progress)
	show(image.Event{Phase: "resolve", Ref: ref})
	resp, err := d.cli.ImagePull(ctx, ref, client.ImagePullOptions{
		Platforms: []ocispec.Platform{{OS: "linux", Architecture: runtime.GOARCH}},
	})
	if err != nil {
		return err
	}
	defer resp.Close()
	var p enginePull
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if m.Error != nil {
			return fmt.Errorf("%s", m.Error.Message)
		}
		if m.Status == "Already exists" {
			d.rc.Logger.Info("image pull", "image", ref, "layer", m.ID, "status", m.Status)
		}
		if e, ok := p.event(ref, m); ok {
			if e.Phase == "layer" && e.Done == e.Total {
				d.rc.Logger.Info("image pull", "image", ref, "layer", m.ID, "status", m.Status, "bytes", e.Total)
			}
			show(e)
		}
	}
	show(image.Event{Phase: "done", Ref: ref, Digest: p.digest})
	return nil
}

// progressOf is the display of a pull on w: image.Printer's, redrawn in
// place when w is a terminal; nothing when w is nil.
func progressOf(w io.Writer) image.Progress {
	if w == nil {
		return func(image.Event) {}
	}
	f, ok := w.(*os.File)
	return image.Printer(w, ok && tty.IsTerminal(int(f.Fd())), false)
}

// enginePull turns the engine's pull messages (one per layer and step,
// as `docker pull` draws them) into airlock's own pull events.
type enginePull struct {
	layers []string         // the layers' ids, in the order the engine named them
	size   map[string]int64 // each layer's compressed size, once known
	digest string
}

// event is m as an event of the pull of ref, if it is one to show: a
// layer's bytes (while downloading), a layer done, or nothing.
func (p *enginePull) event(ref string, m jsonstream.Message) (image.Event, bool) {
	if p.size == nil {
		p.size = map[string]int64{}
	}
	if d, ok := strings.CutPrefix(m.Status, "Digest: "); ok {
		p.digest = d
		return image.Event{}, false
	}
	if m.ID == "" || m.ID == ref {
		return image.Event{}, false
	}
	i := slices.Index(p.layers, m.ID)
	if i < 0 {
		switch m.Status {
		case "Pulling fs layer", "Waiting", "Already exists", "Downloading", "Pull complete":
			p.layers = append(p.layers, m.ID)
			i = len(p.layers) - 1
		default:
			return image.Event{}, false
		}
	}
	e := image.Event{Phase: "layer", Ref: ref, Layer: i + 1, Layers: len(p.layers)}
	switch m.Status {
	case "Downloading":
		if m.Progress == nil || m.Progress.Total <= 0 || m.Progress.Current >= m.Progress.Total {
			return image.Event{}, false
		}
		p.size[m.ID] = m.Progress.Total
		e.Done, e.Total = m.Progress.Current, m.Progress.Total
	case "Pull complete":
		e.Done, e.Total = p.size[m.ID], p.size[m.ID]
	default:
		return image.Event{}, false
	}
	return e, true
}
