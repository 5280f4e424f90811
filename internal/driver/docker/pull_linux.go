package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

// pull has the engine pull ref (for linux on this host's architecture),
// from the registry its reference names, as `docker pull` would: the
// engine's own configuration says which registries it trusts. Its
// progress goes to Options.Progress as airlock's own pull shows it
// (image.Printer: layers and bytes, redrawn on a terminal), to the log, a
// line per layer done, and to PullOf for sandbox id, whose create waits.
func (d *Driver) pull(ctx context.Context, id, ref string) error {
	d.rc.Logger.Info("the engine pulls an image it does not have", "image", ref, "engine", d.cli.DaemonHost(), "sandbox_id", id)
	p := &enginePull{ref: ref}
	d.mu.Lock()
	if d.pulls == nil {
		d.pulls = map[string]*enginePull{}
	}
	d.pulls[id] = p
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.pulls, id)
		d.mu.Unlock()
	}()
	show := progressOf(d.opts.Progress)
	show(image.Event{Phase: "resolve", Ref: ref})
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
		p.track(m)
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

var _ sandbox.PullReporter = (*Driver)(nil)

// PullOf is the engine's pull that the create of sandbox id waits for,
// if it waits for one (sandbox.PullReporter): the image, the layer being
// fetched of those the engine named so far (the engine fetches a few at
// once: one past those done), and the compressed bytes come so far.
func (d *Driver) PullOf(id string) (sandbox.ImagePull, bool) {
	d.mu.Lock()
	p := d.pulls[id]
	d.mu.Unlock()
	if p == nil {
		return sandbox.ImagePull{}, false
	}
	return p.progress(), true
}

// enginePull turns the engine's pull messages (one per layer and step,
// as `docker pull` draws them) into airlock's own pull events, and keeps
// how far the pull is for PullOf.
type enginePull struct {
	ref    string
	layers []string         // the layers' ids, in the order the engine named them
	size   map[string]int64 // each layer's compressed size, once known
	digest string

	mu    sync.Mutex
	got   map[string]int64 // compressed bytes come so far, per layer
	total map[string]int64 // each layer's compressed size, once known
	done  map[string]bool  // the layers pulled (or already there)
	n     int              // layers named so far
}

// track takes m into how far the pull is.
func (p *enginePull) track(m jsonstream.Message) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.got == nil {
		p.got, p.total, p.done = map[string]int64{}, map[string]int64{}, map[string]bool{}
	}
	if m.ID == "" || m.ID == p.ref {
		return
	}
	_, seen := p.got[m.ID]
	switch m.Status {
	case "Pulling fs layer", "Waiting":
		p.got[m.ID] += 0
	case "Downloading":
		if m.Progress != nil {
			p.got[m.ID] = m.Progress.Current
			p.total[m.ID] = max(p.total[m.ID], m.Progress.Total)
		}
	case "Verifying Checksum", "Download complete", "Extracting":
		p.got[m.ID] = max(p.got[m.ID], p.total[m.ID])
	case "Already exists", "Pull complete":
		p.got[m.ID] = max(p.got[m.ID], p.total[m.ID])
		p.done[m.ID] = true
	default:
		return
	}
	if !seen {
		p.n++
	}
}

// progress is how far the pull is.
func (p *enginePull) progress() sandbox.ImagePull {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := sandbox.ImagePull{Image: p.ref, Layers: p.n, Layer: min(len(p.done)+1, p.n)}
	for _, b := range p.got {
		out.Bytes += b
	}
	return out
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
