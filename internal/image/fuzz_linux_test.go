package image

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// FuzzUnpackLayer: whatever a layer holds, unpacking it (alone, or over
// a layer with symlinks out) writes nothing beside the root, and leaves in
// it no device node and no setuid or setgid file.
func FuzzUnpackLayer(f *testing.F) {
	for _, seed := range [][]ent{
		{dir("a/"), file("a/x", "x", 0o4755), file("a/.wh..wh..opq", "", 0o644), file(".wh.a", "", 0o644)},
		{file("../x", "x", 0o644)},
		{symlink("out", "/"), file("out/x", "x", 0o644), symlink("up", ".."), file("up/x", "", 0o644)},
		{ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "out/etc/passwd"}}},
		{ent{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "c", Devmajor: 1, Devminor: 3}}},
	} {
		f.Add(tarOf(f, seed...))
	}
	under := tarOf(f, symlink("out", "/"), symlink("up", ".."), dir("d/"), file("d/f", "f", 0o644))
	f.Fuzz(func(t *testing.T, layer []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		u, err := newUnpacker(root, Limits{MaxFileBytes: 1 << 20, MaxTotalBytes: 4 << 20, MaxEntries: 200})
		if err != nil {
			t.Fatal(err)
		}
		defer u.close()
		if err := u.layer(bytes.NewReader(under), v1.Hash{}, v1.Hash{}); err != nil {
			t.Fatal(err)
		}
		_ = u.layer(bytes.NewReader(layer), v1.Hash{}, v1.Hash{})
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if e.Name() != "root" {
				t.Fatalf("written beside the root: %s", e.Name())
			}
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			m := fi.Mode()
			if m&(os.ModeDevice|os.ModeCharDevice|os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("%s: mode %v", p, m)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
