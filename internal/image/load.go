package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Load adds the images of file to the cache, for a host without a
// registry: an OCI image layout (a directory, or a tar of one) or a
// `docker save` archive. Each image is named as the archive names it
// (its tags, or the layout's org.opencontainers.image.ref.name), else by
// its digest.
func (s *Store) Load(ctx context.Context, file string, p Progress) ([]*Image, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if fi.IsDir() {
		return s.loadLayout(ctx, file, p)
	}
	// A docker save archive has manifest.json at its top.
	if m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) }); err == nil && len(m) > 0 {
		var out []*Image
		for _, d := range m {
			var refs []string
			refs = append(refs, d.RepoTags...)
			img, err := tarball.Image(func() (io.ReadCloser, error) { return os.Open(file) }, nil)
			if len(m) > 1 {
				img, err = imageOfTarball(file, d)
			}
			if err != nil {
				return nil, fmt.Errorf("load %s: %w", file, err)
			}
			got, err := s.loadOne(ctx, img, refs, p)
			if err != nil {
				return nil, err
			}
			out = append(out, got)
		}
		return out, nil
	}
	// Else an OCI layout in a tar: its files (blobs, index.json) are
	// copied out to a directory of the cache first.
	tmp, err := os.MkdirTemp(filepath.Join(s.opts.Dir, "tmp"), "load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := extractLayout(file, tmp); err != nil {
		return nil, fmt.Errorf("load %s: %w", file, err)
	}
	return s.loadLayout(ctx, tmp, p)
}

// imageOfTarball is the image of a docker save archive of several that d
// describes, by its first tag.
func imageOfTarball(file string, d tarball.Descriptor) (v1.Image, error) {
	if len(d.RepoTags) == 0 {
		return nil, errors.New("an archive of several images, one untagged")
	}
	t, err := name.NewTag(d.RepoTags[0])
	if err != nil {
		return nil, err
	}
	return tarball.ImageFromPath(file, &t)
}

func (s *Store) loadLayout(ctx context.Context, dir string, p Progress) ([]*Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s: not an OCI image layout nor a docker save archive: %w", dir, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	var out []*Image
	for _, desc := range im.Manifests {
		var img v1.Image
		switch {
		case desc.MediaType.IsImage():
			img, err = idx.Image(desc.Digest)
		case desc.MediaType.IsIndex():
			img, err = s.platformImage(idx, desc)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load %s: %s: %w", dir, desc.Digest, err)
		}
		var refs []string
		if n := desc.Annotations["io.containerd.image.name"]; n != "" {
			refs = append(refs, n)
		} else if n := desc.Annotations["org.opencontainers.image.ref.name"]; n != "" {
			refs = append(refs, n)
		}
		got, err := s.loadOne(ctx, img, refs, p)
		if err != nil {
			return nil, err
		}
		out = append(out, got)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("load %s: no image in the layout", dir)
	}
	return out, nil
}

// platformImage picks the image of this host's platform from a nested
// index.
func (s *Store) platformImage(idx v1.ImageIndex, desc v1.Descriptor) (v1.Image, error) {
	child, err := idx.ImageIndex(desc.Digest)
	if err != nil {
		return nil, err
	}
	m, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(s.platform) {
			return child.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for %s/%s", s.platform.OS, s.platform.Architecture)
}

func (s *Store) loadOne(ctx context.Context, img v1.Image, refs []string, p Progress) (*Image, error) {
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	for i, r := range refs {
		if n, err := name.ParseReference(r); err == nil {
			refs[i] = n.Name()
		}
	}
	if len(refs) == 0 {
		refs = []string{d.String()}
	}
	got, err := s.add(ctx, refs[0], img, p)
	if err != nil {
		return nil, err
	}
	for _, r := range refs[1:] {
		if err := s.addRef(got, r); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// extractLayout copies the files of an OCI layout out of the tar file into
// dir: only oci-layout, index.json and blobs/ALG/HEX, regular files with
// plain names, so that the archive places nothing else.
func extractLayout(file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		parts := strings.Split(name, "/")
		ok := name == "oci-layout" || name == "index.json" ||
			len(parts) == 3 && parts[0] == "blobs" && validName(parts[1]) && validName(parts[2])
		if hdr.Typeflag == tar.TypeDir || !ok {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("entry %q: not a regular file: %w", hdr.Name, ErrRefused)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name)) //nolint:gosec // G305: name is oci-layout, index.json or blobs/ALG/HEX, checked above
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr) //nolint:gosec // G110: an archive's file, not decompressed here; its layers are checked against their digests and unpacked under the limits
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// validName is a name of letters, digits and a few marks, never "." or "..".
func validName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
