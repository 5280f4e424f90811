package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ent is one entry of a test layer.
type ent struct {
	hdr  tar.Header
	body []byte
}

func file(name, body string, mode int64) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body: []byte(body)}
}

func dir(name string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func symlink(name, target string) ent {
	return ent{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

// tarOf is a gzipped tar of es.
func tarOf(t testing.TB, es ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for _, e := range es {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// imageOf is an image of the given gzipped layers, with a config.
func imageOf(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, layerOf(t, l)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "GREETING=from the image"}
	cf.Config.WorkingDir = "/srv/app"
	cf.Config.User = "root"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testStore is a store whose cache is DIR/cache of a fresh DIR, so that a
// test can check that nothing appeared in DIR beside it.
func testStore(t *testing.T, lim Limits) (*Store, string) {
	t.Helper()
	base := t.TempDir()
	s, err := Open(Options{Dir: filepath.Join(base, "cache"), Limits: lim, MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s, base
}

// onlyCache fails unless base holds only the cache, and the cache no root
// and nothing in progress.
func onlyCache(t *testing.T, base string) {
	t.Helper()
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if e.Name() != "cache" {
			t.Errorf("written outside the cache: %s", filepath.Join(base, e.Name()))
		}
	}
	for _, d := range []string{"roots", "tmp"} {
		ents, _ := os.ReadDir(filepath.Join(base, "cache", d))
		for _, e := range ents {
			t.Errorf("left in the cache after a refused image: %s/%s", d, e.Name())
		}
	}
}

func TestUnpackLayers(t *testing.T) {
	s, _ := testStore(t, Limits{})
	l1 := tarOf(t, dir("a/"), file("a/x", "x", 0o644), file("a/y", "y", 0o644), file("b", "b", 0o644),
		dir("bin/"), file("bin/su", "setuid", 0o4755), file("bin/wall", "setgid", 0o2755),
		dir("keep/"), file("keep/old", "old", 0o644), file("gone", "gone", 0o644),
		ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "a/hard", Linkname: "a/x"}})
	l2 := tarOf(t, dir("a/"), file("a/.wh..wh..opq", "", 0o644), file("a/z", "z", 0o644),
		file(".wh.b", "", 0o644), file("keep/new", "new", 0o644), file(".wh.gone", "", 0o644),
		symlink("link", "/etc/passwd"), file("./dot", "dot", 0o600),
		file("no/parents/listed", "deep", 0o644), file("nowhere/.wh.x", "", 0o644))
	img, err := s.add(context.Background(), "test/layers", imageOf(t, l1, l2), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := img.Root
	for _, tc := range []struct {
		path string
		want string // "" means absent
	}{
		{"a/x", ""}, {"a/y", ""}, {"a/hard", ""}, {"a/z", "z"}, {"b", ""}, {"gone", ""},
		{"keep/old", "old"}, {"keep/new", "new"}, {"dot", "dot"}, {"bin/su", "setuid"},
		{"no/parents/listed", "deep"}, {"nowhere", ""},
	} {
		b, err := os.ReadFile(filepath.Join(root, tc.path))
		switch {
		case tc.want == "" && !errors.Is(err, os.ErrNotExist):
			t.Errorf("%s: whited out, but there (%v)", tc.path, err)
		case tc.want != "" && string(b) != tc.want:
			t.Errorf("%s = %q, %v; want %q", tc.path, b, err, tc.want)
		}
	}
	for _, f := range []string{"bin/su", "bin/wall"} {
		fi, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want 0755 without setuid/setgid", f, fi.Mode())
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "link")); err != nil || target != "/etc/passwd" {
		t.Errorf("link -> %q, %v", target, err)
	}
	for _, d := range []string{"proc", "dev", "tmp", "workspace"} {
		if fi, err := os.Lstat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			t.Errorf("/%s: not a directory of the root: %v", d, err)
		}
	}
	if img.Config.WorkingDir != "/srv/app" || len(img.Config.Env) != 2 || img.Layers != 2 {
		t.Errorf("image %+v: config not kept", img)
	}
}

// TestUnpackHostile: every hostile layer is refused with a message naming
// its entry, and nothing is written outside the cache (nor is a root left
// in it).
func TestUnpackHostile(t *testing.T) {
	var shadow syscall.Stat_t
	if err := syscall.Stat("/etc/shadow", &shadow); err != nil {
		t.Fatal(err)
	}
	small := Limits{MaxFileBytes: 8 << 20, MaxTotalBytes: 32 << 20, MaxEntries: 1000}
	zeros := make([]byte, 8<<20)
	var bomb []ent
	for i := range 8 { // 64 MiB of zeros, 64 KiB gzipped
		bomb = append(bomb, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "zero" + string(rune('0'+i)), Mode: 0o644, Size: int64(len(zeros))}, body: zeros})
	}
	var many []ent
	for i := range 1001 {
		many = append(many, file("f"+strings.Repeat("x", i%50)+string(rune('A'+i%26))+string(rune('a'+i/26)), "", 0o644))
	}
	tests := []struct {
		name   string
		layers func(base string) [][]byte
		lim    Limits
		entry  string // the entry the error must name
	}{
		{"dotdot", func(string) [][]byte { return [][]byte{tarOf(t, file("../../escaped", "x", 0o644))} }, Limits{}, "../../escaped"},
		{"dotdot inside", func(string) [][]byte { return [][]byte{tarOf(t, dir("a/"), file("a/../../escaped", "x", 0o644))} }, Limits{}, "a/../../escaped"},
		{"absolute", func(string) [][]byte { return [][]byte{tarOf(t, file("/tmp/escaped", "x", 0o644))} }, Limits{}, "/tmp/escaped"},
		{"symlinked parent", func(base string) [][]byte {
			return [][]byte{tarOf(t, symlink("out", base), file("out/escaped", "x", 0o644))}
		}, Limits{}, "out/escaped"},
		{"symlinked parent, relative", func(string) [][]byte {
			return [][]byte{tarOf(t, symlink("up", "../.."), file("up/escaped", "x", 0o644))}
		}, Limits{}, "up/escaped"},
		{"symlinked parent of an earlier layer", func(base string) [][]byte {
			return [][]byte{tarOf(t, symlink("out", base)), tarOf(t, dir("out/escaped/"))}
		}, Limits{}, "out/escaped/"},
		{"whiteout through a symlink", func(base string) [][]byte {
			return [][]byte{tarOf(t, symlink("out", base)), tarOf(t, file("out/.wh.cache", "", 0o644))}
		}, Limits{}, "out/.wh.cache"},
		{"hard link to /etc/shadow", func(string) [][]byte {
			return [][]byte{tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "shadow", Linkname: "/etc/shadow"}})}
		}, Limits{}, "shadow"},
		{"hard link climbing to /etc/shadow", func(string) [][]byte {
			return [][]byte{tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "shadow", Linkname: "../../../../../../etc/shadow"}})}
		}, Limits{}, "shadow"},
		{"symlinked grandparent, parents not listed", func(base string) [][]byte {
			return [][]byte{tarOf(t, symlink("out", base), file("out/new/escaped", "x", 0o644))}
		}, Limits{}, "out/new/escaped"},
		{"hard link to a missing file", func(string) [][]byte {
			return [][]byte{tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "no/such"}})}
		}, Limits{}, "l"},
		{"hard link through a symlink", func(string) [][]byte {
			return [][]byte{tarOf(t, symlink("etc", "/etc"), ent{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "shadow", Linkname: "etc/shadow"}})}
		}, Limits{}, "shadow"},
		{"device node", func(string) [][]byte {
			return [][]byte{tarOf(t, dir("dev/"), ent{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "dev/sda", Devmajor: 8, Mode: 0o666}})}
		}, Limits{}, "dev/sda"},
		{"char device", func(string) [][]byte {
			return [][]byte{tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "mem", Devmajor: 1, Devminor: 1, Mode: 0o666}})}
		}, Limits{}, "mem"},
		{"10 GB sparse file", func(base string) [][]byte { return [][]byte{sparseLayer(t, base)} }, Limits{}, "huge"},
		{"gzip bomb", func(string) [][]byte { return [][]byte{tarOf(t, bomb...)} }, small, "zero4"},
		{"too many entries", func(string) [][]byte { return [][]byte{tarOf(t, many...)} }, small, "f"},
		{"whiteout of /", func(string) [][]byte { return [][]byte{tarOf(t, file(".wh..", "", 0o644))} }, Limits{}, ".wh.."},
		{"whiteout of / (dot)", func(string) [][]byte { return [][]byte{tarOf(t, file("./.wh..", "", 0o644))} }, Limits{}, "./.wh.."},
		{"root as a file", func(string) [][]byte { return [][]byte{tarOf(t, file(".", "x", 0o644))} }, Limits{}, "."},
		{"whiteout climbing", func(string) [][]byte { return [][]byte{tarOf(t, file("../.wh.cache", "", 0o644))} }, Limits{}, "../.wh.cache"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, base := testStore(t, tc.lim)
			_, err := s.add(context.Background(), "test/hostile", imageOf(t, tc.layers(base)...), nil)
			if err == nil {
				t.Fatal("unpacked")
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"`+tc.entry) {
				t.Errorf("error %q: want ErrRefused naming the entry %q", err, tc.entry)
			}
			t.Log(err)
			onlyCache(t, base)
			var now syscall.Stat_t
			if err := syscall.Stat("/etc/shadow", &now); err != nil || now.Nlink != shadow.Nlink {
				t.Errorf("/etc/shadow has %d links, had %d", now.Nlink, shadow.Nlink)
			}
			if _, err := os.Lstat("/tmp/escaped"); err == nil {
				t.Error("/tmp/escaped was written")
			}
		})
	}
}

// sparseLayer is a gzipped tar, made by GNU tar, of a sparse file of 10 GB
// named huge.
func sparseLayer(t *testing.T, base string) []byte {
	t.Helper()
	src := filepath.Join(base, "sparse")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	if err := os.Truncate(filepath.Join(src, "huge"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(src, "huge"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(10 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command("tar", "--sparse", "--format=posix", "-czf", "-", "-C", src, "huge").Output()
	if err != nil {
		t.Fatalf("GNU tar: %v", err)
	}
	if len(out) > 1<<20 {
		t.Fatalf("the sparse layer is %d bytes: not sparse", len(out))
	}
	return out
}

// layerOf is the layer of a gzipped tar, its diff ID that of the tar.
func layerOf(t *testing.T, gz []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestUnpackDiffID: a layer whose tar is not the one the image's config
// names (its diff ID) is refused, as the engines refuse it.
func TestUnpackDiffID(t *testing.T) {
	s, base := testStore(t, Limits{})
	// A static layer's diff ID is its compressed digest: wrong.
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(tarOf(t, file("a", "a", 0o644)), types.DockerLayer))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.add(context.Background(), "test/diffid", img, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "diff ID") {
		t.Errorf("got %v, want the diff ID refused", err)
	}
	onlyCache(t, base)
}
