package image

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/tartree"
)

// Save writes the cached image ref (a reference or digest) to file as a
// `docker save` archive, which `airlock image load` and `docker load`
// read, named ref (or the image's first reference when ref is a digest).
// The cache keeps unpacked roots, not the registry's layers, so the
// archive holds one layer made from the root, with the image's config
// (Env, WorkingDir, User, Entrypoint, Cmd): its digest is not the
// registry's, and files have the owners and modes they have in the cache
// (the puller's, setuid and setgid removed).
func (s *Store) Save(ref, file string) error {
	img, err := s.lookup(ref)
	if err != nil {
		r, perr := s.reference(ref)
		if perr != nil {
			return err
		}
		if img, err = s.lookup(r.Name()); err != nil {
			return err
		}
	}
	release, err := s.Hold(img)
	if err != nil {
		return err
	}
	defer release()
	tag, err := saveTag(ref, img)
	if err != nil {
		return err
	}
	root := img.Root
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tartree.Write(root, pw)) }()
		return pr, nil
	})
	if err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	out, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = s.platform.OS, s.platform.Architecture
	c := img.Config
	cf.Config = v1.Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	// Written beside file and renamed: a half-written archive is never
	// left under its name.
	tmp, err := os.CreateTemp(filepath.Dir(file), ".airlock-save-*")
	if err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(tag, out, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("save %s: %w", ref, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("save %s: %w", ref, err)
	}
	return nil
}

// saveTag is the name an archive of img gets: ref when it is a tag, else
// the first of the image's references that is one.
func saveTag(ref string, img *Image) (name.Tag, error) {
	for _, r := range append([]string{ref}, img.Refs...) {
		if r == img.Digest || strings.Contains(r, "@") {
			continue
		}
		if t, err := name.NewTag(r); err == nil {
			return t, nil
		}
	}
	return name.Tag{}, fmt.Errorf("save %s: the image has no tag to be saved under: pull it by a tag", ref)
}

// HoldDigest holds (Hold) the cached image of digest ("sha256:…"), for a
// sandbox that runs on it already: a restarted daemon's reattached one.
func (s *Store) HoldDigest(digest string) (release func(), err error) {
	img, err := s.lookup(digest)
	if err != nil {
		return nil, err
	}
	return s.Hold(img)
}
