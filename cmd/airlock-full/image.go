package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

func init() {
	cli.RegisterCommand(newImageCmd)
	cli.SetImageResolver(resolveImage)
}

// imageFlags are the flags every image command takes.
type imageFlags struct {
	cache, maxCache string
	insecure        []string
}

func (f *imageFlags) add(cmd *cobra.Command) {
	fl := cmd.PersistentFlags()
	fl.StringVar(&f.cache, "cache", "", "the image cache's directory (default $AIRLOCK_IMAGE_CACHE, else $AIRLOCK_CACHE/images, else /var/cache/airlock/images for root, else ~/.cache/airlock/images)")
	fl.StringVar(&f.maxCache, "max-cache", "20G", "the cache's size cap: past it a pull removes the least recently used images")
	fl.StringArrayVar(&f.insecure, "insecure-registry", nil, "a registry (HOST:PORT) that may be reached over plain HTTP (repeatable; also $"+image.EnvInsecure+", comma-separated)")
}

func (f *imageFlags) store() (*image.Store, error) {
	dir := f.cache
	if dir == "" {
		var err error
		if dir, err = image.DefaultDir(); err != nil {
			return nil, err
		}
	}
	max, err := cli.ParseSize("--max-cache", f.maxCache)
	if err != nil {
		return nil, err
	}
	return image.Open(image.Options{Dir: dir, MaxBytes: max, Insecure: append(image.InsecureFromEnv(), f.insecure...)})
}

// resolveImage is `airlock run --image` on a driver that runs an image
// from its unpacked root: the default cache, and the insecure registries
// of the environment.
func resolveImage(ctx context.Context, ref string, w io.Writer, quiet bool) (cli.ImageRoot, error) {
	f := imageFlags{maxCache: "20G"}
	s, err := f.store()
	if err != nil {
		return cli.ImageRoot{}, err
	}
	img, err := s.Get(ctx, ref, progress(w, quiet))
	if err != nil {
		return cli.ImageRoot{}, err
	}
	// Held until this process (the one-shot run) ends: not evicted or
	// removed under its sandbox.
	if _, err := s.Hold(img); err != nil {
		return cli.ImageRoot{}, err
	}
	return cli.ImageRoot{Root: img.Root, Digest: img.Digest, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir}, nil
}

// daemonImages is the image source of the daemon and of airlock mcp: the
// default cache (opened at the first image) and the insecure registries
// of the environment. A create that must pull says so in the log: when
// the pull starts, each layer as it lands, and when it is done. Each
// sandbox holds its image (image.Store.Hold) until it ends (ImageRun.
// Release), so that no eviction or rm removes a root under it, and the
// cache's cap applies again once the last one is gone.
type daemonImages struct {
	log  *slog.Logger
	once sync.Once
	s    *image.Store
	err  error

	// What /metrics shows of the pulls in progress: the creates waiting
	// for an image, and per image pulled the bytes fetched so far and the
	// bytes of the layers begun.
	mu      sync.Mutex
	waiting int
	pulls   map[string]*pullState
}

type pullState struct {
	before, done, total int64
	layer, layers       int
}

// PullOf is the pull of ref in progress (supervisor.ImagePulls): the
// creates waiting for it show it.
func (d *daemonImages) PullOf(ref string) (supervisor.ImagePull, bool) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return supervisor.ImagePull{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pulls[r.Name()]
	if p == nil {
		return supervisor.ImagePull{}, false
	}
	return supervisor.ImagePull{Image: r.Name(), Layer: p.layer, Layers: p.layers, Bytes: p.before + p.done}, true
}

// collectors are the image metrics of the daemon's /metrics: a create
// that must pull shows there while it waits.
func (d *daemonImages) collectors() []prometheus.Collector {
	sum := func(f func(*pullState) int64) float64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		var n int64
		for _, p := range d.pulls {
			n += f(p)
		}
		return float64(n)
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_image_creates_waiting", Help: "Creates waiting for their image to be pulled and unpacked."}, func() float64 {
			d.mu.Lock()
			defer d.mu.Unlock()
			return float64(d.waiting)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_image_pulls", Help: "Images being pulled."}, func() float64 {
			return sum(func(*pullState) int64 { return 1 })
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_image_pull_bytes", Help: "Compressed bytes the pulls in progress have fetched."}, func() float64 {
			return sum(func(p *pullState) int64 { return p.before + p.done })
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_image_pull_layer_bytes", Help: "Compressed bytes of the layers the pulls in progress have begun (fetched or not)."}, func() float64 {
			return sum(func(p *pullState) int64 { return p.before + p.total })
		}),
	}
}

// progress is a pull's progress (image.Progress) into the log and the
// metrics.
func (d *daemonImages) progress(e image.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch e.Phase {
	case "resolve":
		if d.pulls == nil {
			d.pulls = map[string]*pullState{}
		}
		d.pulls[e.Ref] = &pullState{}
		d.log.Info("image pull: a create waits for its image", "image", e.Ref)
	case "layer":
		p := d.pulls[e.Ref]
		if p == nil {
			return
		}
		p.done, p.total, p.layer, p.layers = e.Done, e.Total, e.Layer, e.Layers
		if e.Done == e.Total {
			p.before += e.Total
			p.done, p.total = 0, 0
			d.log.Info("image pull", "image", e.Ref, "layer", e.Layer, "layers", e.Layers, "bytes", e.Total)
		}
	case "done":
		delete(d.pulls, e.Ref)
	}
}

func (d *daemonImages) open() error {
	d.once.Do(func() {
		f := imageFlags{maxCache: "20G"}
		d.s, d.err = f.store()
	})
	return d.err
}

// HoldImage holds the root of a sandbox a restarted daemon reattached to
// (supervisor.ImageHolder).
func (d *daemonImages) HoldImage(digest string) (func(), error) {
	if err := d.open(); err != nil {
		return nil, err
	}
	return d.s.HoldDigest(digest)
}

func (d *daemonImages) ImageRoot(ctx context.Context, ref string) (supervisor.ImageRun, error) {
	if err := d.open(); err != nil {
		return supervisor.ImageRun{}, err
	}
	start := time.Now()
	pulled, pulledRef := false, ""
	d.mu.Lock()
	d.waiting++
	d.mu.Unlock()
	img, err := d.s.Get(ctx, ref, func(e image.Event) {
		if e.Phase == "resolve" { // guarded: a caller that gives up leaves the pull running
			d.mu.Lock()
			pulled, pulledRef = true, e.Ref
			d.mu.Unlock()
		}
		d.progress(e)
	})
	d.mu.Lock()
	d.waiting--
	if err == nil || ctx.Err() == nil {
		// This call's pull, done or failed. (One this caller gave up on
		// goes on: its "done" ends it.)
		delete(d.pulls, pulledRef)
	}
	wasPulled := pulled
	d.mu.Unlock()
	if err != nil {
		if wasPulled {
			d.log.Warn("image pull failed", "image", ref, "err", err, "seconds", time.Since(start).Seconds())
		}
		return supervisor.ImageRun{}, err
	}
	if wasPulled {
		d.log.Info("image pulled", "image", ref, "digest", img.Digest, "seconds", time.Since(start).Seconds())
	}
	release, err := d.s.Hold(img)
	if err != nil {
		return supervisor.ImageRun{}, err
	}
	return supervisor.ImageRun{Root: img.Root, Digest: img.Digest, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir, Release: release}, nil
}

// progress shows a pull's progress on w: redrawn on a terminal, lines
// otherwise; nothing when quiet.
func progress(w io.Writer, quiet bool) image.Progress {
	f, ok := w.(*os.File)
	return image.Printer(w, ok && tty.IsTerminal(int(f.Fd())), quiet)
}

func newImageCmd() *cobra.Command {
	var f imageFlags
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Pull, load, save, list and remove the images native, gVisor and microvm sandboxes run (--image)",
		Long: `The image cache: images pulled from registries (or loaded from archives)
and unpacked, each once, into a read-only root that native, gVisor and
microvm sandboxes of that image share (airlock run --image REF). Credentials come
from the Docker config file and its credential helpers, as docker finds
them; a registry is reached over plain HTTP only when named by
--insecure-registry. An image's Entrypoint and Cmd are never run: a
sandbox runs the commands it is given.`,
	}
	f.add(cmd)
	var quiet bool
	var policyFile string
	pull := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image (REF: name[:tag] or name@sha256:DIGEST) into the cache",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if policyFile != "" {
				pol, err := policy.Load(policyFile)
				if err != nil {
					return err
				}
				if err := pol.CheckImage(args[0]); err != nil {
					return err
				}
			}
			s, err := f.store()
			if err != nil {
				return err
			}
			img, err := s.Pull(cmd.Context(), args[0], progress(cmd.ErrOrStderr(), quiet))
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), img.Digest)
			return nil
		},
	}
	pull.Flags().BoolVarP(&quiet, "quiet", "q", false, "show no progress; print only the digest")
	pull.Flags().StringVar(&policyFile, "policy", "", "a policy file whose images and require_image_digest the image must pass (refused before anything is fetched)")
	load := &cobra.Command{
		Use:   "load FILE",
		Short: "Load the images of an OCI image layout (a directory or a tar of one) or a docker save archive",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.store()
			if err != nil {
				return err
			}
			imgs, err := s.Load(cmd.Context(), args[0], progress(cmd.ErrOrStderr(), quiet))
			if err != nil {
				return err
			}
			for _, img := range imgs {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", img.Digest, strings.Join(img.Refs, " "))
			}
			return nil
		},
	}
	load.Flags().BoolVarP(&quiet, "quiet", "q", false, "show no progress")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the cached images, most recently used first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.store()
			if err != nil {
				return err
			}
			imgs, err := s.List()
			if err != nil {
				return err
			}
			if asJSON {
				if imgs == nil {
					imgs = []*image.Image{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(imgs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REFS\tDIGEST\tSIZE\tLAYERS\tUSED")
			for _, img := range imgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", strings.Join(img.Refs, ","), img.Digest[:19], image.Size(img.Size), img.Layers, img.Used.UTC().Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	rm := &cobra.Command{
		Use:   "rm REF...",
		Short: "Remove images (by reference or digest) from the cache",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.store()
			if err != nil {
				return err
			}
			for _, r := range args {
				if err := s.Remove(r); err != nil {
					return err
				}
			}
			return nil
		},
	}
	save := &cobra.Command{
		Use:   "save REF FILE",
		Short: "Write a cached image to FILE as a docker save archive (one layer made from its root), for airlock image load or docker load",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.store()
			if err != nil {
				return err
			}
			return s.Save(args[0], args[1])
		},
	}
	cmd.AddCommand(pull, load, save, ls, rm)
	return cmd
}
