package kube

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// Media types of a one-layer OCI image.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// ociImage is a one-layer image whose layer is an uncompressed tar, as an
// OCI image layout archive (what `ctr images import` takes).
type ociImage struct {
	// ref is the full reference containerd stores it under:
	// "airlock.invalid/rootimage:…".
	ref string
	// layer opens the layer; layerDigest ("sha256:…") and layerSize
	// describe it.
	layer       func() (io.ReadCloser, error)
	layerDigest string
	layerSize   int64
	// entrypoint and cmd are the image's defaults.
	entrypoint, cmd []string
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// writeArchive streams the image as an OCI layout tar to w.
func (img ociImage) writeArchive(w io.Writer) error {
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Entrypoint": img.entrypoint,
			"Cmd":        img.cmd,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{img.layerDigest}},
	})
	if err != nil {
		return fmt.Errorf("encode the config of %s: %w", img.ref, err)
	}
	configDesc := descriptor{MediaType: mediaConfig, Digest: digestOf(config), Size: int64(len(config))}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        configDesc,
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: img.layerDigest, Size: img.layerSize}},
	})
	if err != nil {
		return fmt.Errorf("encode the manifest of %s: %w", img.ref, err)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []descriptor{{
			MediaType: mediaManifest, Digest: digestOf(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": img.ref},
		}},
	})
	if err != nil {
		return fmt.Errorf("encode the index of %s: %w", img.ref, err)
	}
	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(digestOf(manifest)), manifest},
		{blobPath(configDesc.Digest), config},
	}
	for _, f := range files {
		if err := writeTarFile(tw, f.name, int64(len(f.data)), bytes.NewReader(f.data)); err != nil {
			return err
		}
	}
	layer, err := img.layer()
	if err != nil {
		return fmt.Errorf("open the layer of %s: %w", img.ref, err)
	}
	defer layer.Close()
	if err := writeTarFile(tw, blobPath(img.layerDigest), img.layerSize, layer); err != nil {
		return err
	}
	return tw.Close()
}

// writeTarFile adds a regular file to tw.
func writeTarFile(tw *tar.Writer, name string, size int64, r io.Reader) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("write %s: %d bytes, expected %d", name, n, size)
	}
	return nil
}

func blobPath(digest string) string { return "blobs/sha256/" + digest[len("sha256:"):] }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pauseImage makes the image of the Pods' sandbox container: the pause
// program alone, as /pause.
func pauseImage(ref, pausePath string) (ociImage, error) {
	bin, err := os.ReadFile(pausePath)
	if err != nil {
		return ociImage{}, fmt.Errorf("read the pause program: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	hdr := &tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
	if err := tw.WriteHeader(hdr); err != nil {
		return ociImage{}, fmt.Errorf("make the pause image: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return ociImage{}, fmt.Errorf("make the pause image: %w", err)
	}
	if err := tw.Close(); err != nil {
		return ociImage{}, fmt.Errorf("make the pause image: %w", err)
	}
	data := layer.Bytes()
	return ociImage{
		ref:         ref,
		layer:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		layerDigest: digestOf(data),
		layerSize:   int64(len(data)),
		entrypoint:  []string{"/pause"},
	}, nil
}

// fileImage is an image whose layer is a tarball on disk with a known
// sha256 (hex).
func fileImage(ref, path, sha string, size int64) ociImage {
	return ociImage{
		ref:         ref,
		layer:       func() (io.ReadCloser, error) { return os.Open(path) },
		layerDigest: "sha256:" + sha,
		layerSize:   size,
		cmd:         []string{"/bin/sh"},
	}
}
