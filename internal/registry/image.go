package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// SmallEnv and SmallWorkDir are SmallImage's configuration.
var (
	SmallEnv     = []string{"PATH=/bin", "GREETING=from the image"}
	SmallWorkDir = "/srv"
)

// SmallImage is a one-layer image whose root is the host's dash as
// /bin/sh with the C library it needs, and an empty /srv, its working
// directory; its Env is SmallEnv, its User root, its Cmd /bin/false (which
// nothing should run).
func SmallImage() (v1.Image, error) {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, d := range []string{"bin/", "lib/", "lib/x86_64-linux-gnu/", "lib64/", "srv/", "etc/", "home/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ host, in string }{
		{"/bin/dash", "bin/sh"},
		{"/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"},
	} {
		body, err := os.ReadFile(f.host)
		if err != nil {
			return nil, fmt.Errorf("the small image needs %s: %w", f.host, err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.in, Mode: 0o755, Size: int64(len(body))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	l, err := layerOf(b.Bytes())
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = SmallEnv
	cf.Config.WorkingDir = SmallWorkDir
	cf.Config.User = "root"
	cf.Config.Cmd = []string{"/bin/false"}
	return mutate.ConfigFile(img, cf)
}

// Push writes img to the registry as repo:tag, over plain HTTP, and
// returns the reference.
func (r *Registry) Push(repoTag string, img v1.Image) (string, error) {
	ref := r.Host + "/" + repoTag
	nr, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	var opts []remote.Option
	if r.User != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password}))
	}
	if err := remote.Write(nr, img, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref, nil
}

// layerOf is the layer of a gzipped tar, its diff ID that of the tar.
func layerOf(gz []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil })
}

// RootEnv and RootWorkDir are RootImage's configuration.
var (
	RootEnv     = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from the image"}
	RootWorkDir = "/srv"
)

// RootImage is the image of a root in the tar file at path (the test rigs'
// debootstrap root, with python3), as one layer compressed fast; its Env
// is RootEnv and its WorkingDir RootWorkDir.
func RootImage(path string) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(path, tarball.WithCompressionLevel(1))
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = RootEnv
	cf.Config.WorkingDir = RootWorkDir
	return mutate.ConfigFile(img, cf)
}
