package image

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestSave: an image saved from the cache (`airlock image save`) loads
// into another cache (`airlock image load`) with the same files, links
// and config, under the name it was saved as or its own name when saved
// by digest; an image the cache lacks is an error and leaves no file.
func TestSave(t *testing.T) {
	hard := ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "srv/app/again", Linkname: "srv/app/main.py"}}
	img := imageOf(t, tarOf(t, dir("srv/"), dir("srv/app/"), file("srv/app/main.py", "print('hi')\n", 0o755),
		symlink("srv/app/link", "main.py"), hard, dir("empty/")))
	tmp := t.TempDir()
	in := filepath.Join(tmp, "in.tar")
	tag, _ := name.NewTag("registry.example/team/app:1")
	if err := tarball.WriteToFile(in, tag, img); err != nil {
		t.Fatal(err)
	}
	a, _ := testStore(t, Limits{})
	got, err := a.Load(context.Background(), in, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ref, name string }{
		{"registry.example/team/app:1", "registry.example/team/app:1"},
		{got[0].Digest, "registry.example/team/app:1"},
	} {
		out := filepath.Join(tmp, "out.tar")
		if err := a.Save(tc.ref, out); err != nil {
			t.Fatalf("save %s: %v", tc.ref, err)
		}
		b, _ := testStore(t, Limits{})
		back, err := b.Load(context.Background(), out, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(back) != 1 || !reflect.DeepEqual(back[0].Config, got[0].Config) || back[0].Refs[0] != tc.name {
			t.Fatalf("saved %s, loaded %+v, want the config %+v as %s", tc.ref, back, got[0].Config, tc.name)
		}
		root := back[0].Root
		if b, err := os.ReadFile(filepath.Join(root, "srv/app/main.py")); err != nil || string(b) != "print('hi')\n" {
			t.Errorf("main.py: %q %v", b, err)
		}
		if l, err := os.Readlink(filepath.Join(root, "srv/app/link")); err != nil || l != "main.py" {
			t.Errorf("link: %q %v", l, err)
		}
		var s1, s2 syscall.Stat_t
		_ = syscall.Stat(filepath.Join(root, "srv/app/main.py"), &s1)
		_ = syscall.Stat(filepath.Join(root, "srv/app/again"), &s2)
		if s1.Ino == 0 || s1.Ino != s2.Ino {
			t.Errorf("the hard link is not one file: inodes %d and %d", s1.Ino, s2.Ino)
		}
		if fi, err := os.Stat(filepath.Join(root, "empty")); err != nil || !fi.IsDir() {
			t.Errorf("empty dir: %v", err)
		}
	}
	// HoldDigest holds it as Hold does (a reattached sandbox's image).
	release, err := a.HoldDigest(got[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove("registry.example/team/app:1"); !errors.Is(err, ErrInUse) {
		t.Errorf("remove an image held by digest: %v", err)
	}
	release()
	if _, err := a.HoldDigest("sha256:" + strings.Repeat("0", 64)); err == nil {
		t.Error("held an image the cache lacks")
	}
	missing := filepath.Join(tmp, "missing.tar")
	if err := a.Save("registry.example/team/other:1", missing); err == nil {
		t.Error("saved an image the cache lacks")
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 2 {
		t.Errorf("files left: %v", ents)
	}
}
