package supervisor

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ImageSource gives the unpacked root of an image, for the drivers that
// run an image from it (sandbox.Capabilities.ImageRoot: native, gVisor);
// internal/image's cache is one, which pulls what it lacks.
type ImageSource interface {
	// ImageRoot returns the root directory of the image ref, and the
	// environment the image sets.
	ImageRoot(ctx context.Context, ref string) (root string, env []string, err error)
}

// withImageRoot is spec with its image unpacked as its root and the
// image's environment under the template's, when its driver (caps) runs
// images from their unpacked root; otherwise spec as it is.
func (s *Supervisor) withImageRoot(ctx context.Context, caps sandbox.Capabilities, spec sandbox.Spec) (sandbox.Spec, error) {
	if !caps.ImageRoot || spec.Image == "" || spec.Root != "" {
		return spec, nil
	}
	if s.opts.Images == nil {
		return spec, nil // CheckSpec says the image was not unpacked
	}
	s.log.Info("unpacking the sandbox's image", "sandbox_id", spec.ID, "image", spec.Image)
	root, env, err := s.opts.Images.ImageRoot(ctx, spec.Image)
	if err != nil {
		return spec, fmt.Errorf("image %s: %w", spec.Image, err)
	}
	spec.Root = root
	spec.Env = append(append([]string(nil), env...), spec.Env...)
	return spec, nil
}
