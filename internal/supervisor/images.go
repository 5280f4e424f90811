package supervisor

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// ImageSource gives the unpacked root of an image, for the drivers that
// run an image from it (sandbox.Capabilities.ImageRoot: native, gVisor,
// microvm); internal/image's cache is one, which pulls what it lacks.
type ImageSource interface {
	// ImageRoot returns the image ref unpacked, pulling it first if it
	// must (and saying so in the daemon's log).
	ImageRoot(ctx context.Context, ref string) (ImageRun, error)
}

// ImageHolder is an ImageSource that can hold an image it unpacked
// before, by digest, for a sandbox a restarted daemon reattached to (so
// that the cache does not evict its root under it).
type ImageHolder interface {
	HoldImage(digest string) (release func(), err error)
}

// ImagePulls is an ImageSource that says how far the pull of an image
// is: a sandbox whose create waits for it shows that (Info.Pull).
type ImagePulls interface {
	// PullOf is the pull of ref in progress, if there is one.
	PullOf(ref string) (ImagePull, bool)
}

// ImagePull is a pull in progress: layer Layer of Layers is being
// fetched, Bytes compressed bytes have come so far.
type ImagePull = sandbox.ImagePull

// pullOf is the pull the create of rec waits for, if it waits for one:
// the image source's (the drivers that run an image from its unpacked
// root), or the driver's own (sandbox.PullReporter: Docker's engine, a
// Kubernetes node).
func (s *Supervisor) pullOf(rec store.Sandbox) *ImagePull {
	if rec.State != store.StateCreating {
		return nil
	}
	d := s.opts.Drivers[rec.Driver]
	if d == nil {
		return nil
	}
	if src, ok := s.opts.Images.(ImagePulls); ok && rec.Spec.Image != "" && d.Capabilities().ImageRoot {
		if p, ok := src.PullOf(rec.Spec.Image); ok {
			return &p
		}
		return nil
	}
	if r, ok := d.(sandbox.PullReporter); ok {
		if p, ok := r.PullOf(rec.ID); ok {
			return &p
		}
	}
	return nil
}

// ImageRun is an image unpacked for one sandbox.
type ImageRun struct {
	// Root is its root directory.
	Root string
	// Digest is its manifest's digest ("sha256:…").
	Digest string
	// Env is the environment the image sets, and WorkingDir its
	// working directory ("" for none).
	Env        []string
	WorkingDir string
	// Release, when set, lets the cache evict the root again: the
	// sandbox no longer runs on it. Called once.
	Release func()
}

// withImageRoot is spec with its image unpacked as its root and the
// image's environment under the template's, when its driver (caps) runs
// images from their unpacked root; otherwise spec as it is, and a zero
// ImageRun.
func (s *Supervisor) withImageRoot(ctx context.Context, caps sandbox.Capabilities, spec sandbox.Spec) (sandbox.Spec, ImageRun, error) {
	if !caps.ImageRoot || spec.Image == "" || spec.Root != "" {
		return spec, ImageRun{}, nil
	}
	if s.opts.Images == nil {
		return spec, ImageRun{}, nil // CheckSpec says the image was not unpacked
	}
	img, err := s.opts.Images.ImageRoot(ctx, spec.Image)
	if err != nil {
		return spec, ImageRun{}, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	spec.Root = img.Root
	spec.Env = append(append([]string(nil), img.Env...), spec.Env...)
	return spec, img, nil
}

// defaultDir is dir, or the working directory of the sandbox's image when
// dir is empty.
func (l *live) defaultDir(dir string) string {
	if dir != "" {
		return dir
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.WorkDir
}

// imageOf is the image sandbox id runs and the digest it was unpacked
// from ("" when its driver's engine has it).
func (s *Supervisor) imageOf(id string) (ref, digest string) {
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l == nil {
		return "", ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Spec.Image, l.rec.ImageDigest
}

// holdImage holds the image root a reattached sandbox runs on, when the
// image source can.
func (s *Supervisor) holdImage(l *live) {
	h, ok := s.opts.Images.(ImageHolder)
	if !ok || l.rec.ImageDigest == "" {
		return
	}
	release, err := h.HoldImage(l.rec.ImageDigest)
	if err != nil {
		s.log.Warn("the image of a reattached sandbox is not held: the cache may evict its root", "sandbox_id", l.rec.ID, "digest", l.rec.ImageDigest, "err", err)
		return
	}
	l.releaseImage = release
}
