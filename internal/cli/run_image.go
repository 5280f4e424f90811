package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ImageRoot is an image unpacked for a driver with
// Capabilities.ImageRoot: its root directory, and what of its
// configuration applies to a sandbox.
type ImageRoot struct {
	Root       string
	Digest     string
	Env        []string
	WorkingDir string
}

// resolveImage pulls an image into the image cache unless it is there,
// showing progress on w unless quiet; nil in a build without the cache (the
// front, which hands --image off to the complete airlock).
var resolveImage func(ctx context.Context, ref string, w io.Writer, quiet bool) (ImageRoot, error)

// SetImageResolver sets how `airlock run --image` gets an image for a
// driver that runs one from its unpacked root.
func SetImageResolver(f func(ctx context.Context, ref string, w io.Writer, quiet bool) (ImageRoot, error)) {
	resolveImage = f
}

// withImage is spec with its image pulled and unpacked as its root, the
// image's environment under the sandbox's, and workdir the image's
// working directory unless one was given, and the digest unpacked.
func withImage(ctx context.Context, spec sandbox.Spec, workdir string, w io.Writer, quiet bool) (sandbox.Spec, string, string, error) {
	if spec.Root != "" {
		return spec, workdir, "", errors.New("--root and --image do not go together: the image is the root")
	}
	if resolveImage == nil {
		return spec, workdir, "", errors.New("this airlock has no image cache: run the complete airlock (airlock-full)")
	}
	img, err := resolveImage(ctx, spec.Image, w, quiet)
	if err != nil {
		return spec, workdir, "", fmt.Errorf("image %s: %w", spec.Image, err)
	}
	spec.Root = img.Root
	spec.Env = append(append([]string(nil), img.Env...), spec.Env...)
	if workdir == "" {
		workdir = img.WorkingDir
	}
	return spec, workdir, img.Digest, nil
}
