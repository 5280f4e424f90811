package image

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// startRegistry runs the reference registry for the test, on loopback.
func startRegistry(t *testing.T) (*registry.Registry, string) {
	t.Helper()
	testcap.Require(t, "registry")
	dir := t.TempDir()
	r, err := registry.Run(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r, dir
}

// push writes img to the registry as ref, with the test's own transport
// (plain HTTP to loopback).
func push(t *testing.T, ref string, img v1.Image) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(authn.Anonymous)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return r
}

// SmallRoot is a layer with the host's dash as /bin/sh, with the C library
// it needs: a root a sandbox can run sh -c in.
func smallRoot(t *testing.T) []byte {
	t.Helper()
	es := []ent{dir("bin/"), dir("lib/"), dir("lib/x86_64-linux-gnu/"), dir("lib64/"), dir("usr/"), dir("usr/bin/"), dir("etc/")}
	for _, f := range []struct{ host, in string }{
		{"/bin/dash", "bin/sh"},
		{"/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"},
	} {
		b, err := os.ReadFile(f.host)
		if err != nil {
			t.Skipf("the small root needs %s: %v", f.host, err)
		}
		es = append(es, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: f.in, Mode: 0o755, Size: int64(len(b))}, body: b})
	}
	es = append(es, symlink("usr/bin/sh", "/bin/sh"))
	return tarOf(t, es...)
}

// counter counts the blob downloads of a store's transport.
type counter struct {
	base  http.RoundTripper
	blobs atomic.Int64
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
		c.blobs.Add(1)
	}
	return c.base.RoundTrip(req)
}

func TestRegistryPull(t *testing.T) {
	r, _ := startRegistry(t)
	img := imageOf(t, smallRoot(t), tarOf(t, dir("srv/"), dir("srv/app/"), file("srv/app/hello", "hello\n", 0o644)))
	ref := push(t, r.Host+"/test/small:1", img)
	want, _ := img.Digest()

	t.Run("insecure only where configured", func(t *testing.T) {
		s, _ := testStore(t, Limits{})
		_, err := s.Pull(context.Background(), ref.String(), nil)
		if !errors.Is(err, ErrInsecure) {
			t.Fatalf("pull from a plain-HTTP registry not configured as insecure: %v, want ErrInsecure", err)
		}
	})

	s, err := Open(Options{Dir: filepath.Join(t.TempDir(), "cache"), Insecure: []string{r.Host}, MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	cnt := &counter{base: remote.DefaultTransport}
	s.opts.Transport = cnt
	var events []Event
	got, err := s.Pull(context.Background(), ref.String(), func(e Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != want.String() {
		t.Errorf("digest %s, want %s", got.Digest, want)
	}
	if b, err := os.ReadFile(filepath.Join(got.Root, "srv/app/hello")); err != nil || string(b) != "hello\n" {
		t.Errorf("srv/app/hello: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(got.Root, "bin/sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/sh: %v", err)
	}
	if got.Config.WorkingDir != "/srv/app" {
		t.Errorf("working dir %q", got.Config.WorkingDir)
	}
	done := map[int]bool{}
	for _, e := range events {
		if e.Phase == "layer" && e.Done == e.Total {
			done[e.Layer] = true
		}
	}
	layers := len(done)
	if layers != 2 || events[len(events)-1].Phase != "done" {
		t.Errorf("progress: %d layers done of 2, events %+v", layers, events)
	}
	before := cnt.blobs.Load()

	t.Run("cached by digest, no download", func(t *testing.T) {
		pinned := r.Host + "/test/small@" + want.String()
		img, err := s.Get(context.Background(), pinned, nil)
		if err != nil || img.Digest != want.String() {
			t.Fatalf("get %s: %v, %v", pinned, img, err)
		}
		if _, err := s.Get(context.Background(), ref.String(), nil); err != nil {
			t.Fatal(err)
		}
		if n := cnt.blobs.Load() - before; n != 0 {
			t.Errorf("%d blob downloads for a cached image", n)
		}
	})

	t.Run("wrong digest refused", func(t *testing.T) {
		bad := r.Host + "/test/small@sha256:" + strings.Repeat("0", 64)
		if _, err := s.Pull(context.Background(), bad, nil); err == nil {
			t.Fatalf("pulled %s", bad)
		}
	})

	t.Run("ls and rm", func(t *testing.T) {
		all, err := s.List()
		if err != nil || len(all) != 1 || len(all[0].Refs) == 0 || all[0].Refs[0] != ref.Name() {
			t.Fatalf("ls: %+v, %v", all, err)
		}
		if err := s.Remove(ref.String()); err != nil {
			t.Fatal(err)
		}
		if all, _ := s.List(); len(all) != 0 {
			t.Errorf("ls after rm: %+v", all)
		}
		if _, err := os.Stat(got.Root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the root is still there: %v", err)
		}
	})
}

// TestRegistryConcurrentPull: ten concurrent gets of one image not yet
// pulled, and a pull of another process, download each blob once.
func TestRegistryConcurrentPull(t *testing.T) {
	r, _ := startRegistry(t)
	img := imageOf(t, smallRoot(t), tarOf(t, file("two", "2", 0o644)))
	ref := push(t, r.Host+"/test/concurrent:1", img)
	cnt := &counter{base: remote.DefaultTransport}
	s, err := Open(Options{Dir: filepath.Join(t.TempDir(), "cache"), Insecure: []string{r.Host}, Transport: cnt, MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	digests := make([]string, 10)
	for i := range digests {
		wg.Go(func() {
			got, err := s.Get(context.Background(), ref.String(), nil)
			if err != nil {
				t.Error(err)
				return
			}
			digests[i] = got.Digest
		})
	}
	// And a store of another process on the same cache (flock is per
	// open file, so a second Store stands for one).
	other, err := Open(Options{Dir: s.opts.Dir, Insecure: []string{r.Host}, Transport: cnt, MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if _, err := other.Pull(context.Background(), ref.String(), nil); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	// Two layers and the config.
	if n := cnt.blobs.Load(); n != 3 {
		t.Errorf("%d blob downloads for ten concurrent pulls of an image of 3 blobs", n)
	}
	for _, d := range digests[1:] {
		if d != digests[0] {
			t.Errorf("digests differ: %v", digests)
		}
	}
}

// killer kills the registry once a blob's body has passed 1 MiB.
type killer struct {
	base http.RoundTripper
	kill func()
}

func (k *killer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := k.base.RoundTrip(req)
	if err == nil && strings.Contains(req.URL.Path, "/blobs/") {
		resp.Body = &killBody{ReadCloser: resp.Body, kill: k.kill}
	}
	return resp, err
}

type killBody struct {
	io.ReadCloser
	n    int
	kill func()
}

func (b *killBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.n += n; b.n > 1<<20 && b.kill != nil {
		b.kill()
		b.kill = nil
	}
	return n, err
}

// TestRegistryKilledMidLayer: a pull whose registry dies mid-layer fails,
// leaves no root (nor anything in progress) in the cache, and a pull
// from the restarted registry then succeeds.
func TestRegistryKilledMidLayer(t *testing.T) {
	r, dir := startRegistry(t)
	big := make([]byte, 16<<20) // random: gzip keeps it 16 MiB
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	img := imageOf(t, tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: int64(len(big))}, body: big}))
	ref := push(t, r.Host+"/test/big:1", img)
	cache := filepath.Join(t.TempDir(), "cache")
	k := &killer{base: remote.DefaultTransport, kill: r.Stop}
	s, err := Open(Options{Dir: cache, Insecure: []string{r.Host}, Transport: k, MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Pull(ctx, ref.String(), nil); err == nil {
		t.Fatal("a pull from a registry killed mid-layer succeeded")
	} else {
		t.Log(err)
	}
	for _, d := range []string{"roots", "tmp"} {
		if ents, _ := os.ReadDir(filepath.Join(cache, d)); len(ents) != 0 {
			t.Errorf("%s/ holds %d entries after a failed pull", d, len(ents))
		}
	}
	if _, err := s.Get(ctx, ref.String(), nil); err == nil {
		t.Error("get found an image the failed pull left")
	}
	r2, err := registry.RunOn(ctx, dir, r.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Stop()
	got, err := s.Pull(ctx, ref.String(), nil)
	if err != nil {
		t.Fatalf("pull after the registry restarted: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(got.Root, "big")); err != nil || fi.Size() != int64(len(big)) {
		t.Errorf("big: %v", err)
	}
}

// TestLoad: an OCI image layout (a directory, and a tar of one) and a
// docker save archive load as the image they hold.
func TestLoad(t *testing.T) {
	img := imageOf(t, tarOf(t, file("hello", "hello", 0o644)))
	want, _ := img.Digest()
	tmp := t.TempDir()
	save := filepath.Join(tmp, "save.tar")
	tag, _ := name.NewTag("registry.example/team/hello:1")
	if err := tarball.WriteToFile(save, tag, img); err != nil {
		t.Fatal(err)
	}
	lay := filepath.Join(tmp, "layout")
	lp, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "registry.example/team/hello:2"})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, ref string }{
		{"docker save", save, "registry.example/team/hello:1"},
		{"OCI layout", lay, "registry.example/team/hello:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testStore(t, Limits{})
			got, err := s.Load(context.Background(), tc.file, nil)
			if err != nil {
				t.Fatal(err)
			}
			// docker save stores the layers uncompressed: its manifest
			// differs from the registry's, and so may its digest.
			if len(got) != 1 || (tc.name == "OCI layout" && got[0].Digest != want.String()) {
				t.Fatalf("loaded %+v, want one image %s", got, want)
			}
			if b, err := os.ReadFile(filepath.Join(got[0].Root, "hello")); err != nil || string(b) != "hello" {
				t.Errorf("hello: %q, %v", b, err)
			}
			if _, err := s.Get(context.Background(), tc.ref, nil); err != nil {
				t.Errorf("get %s after load: %v", tc.ref, err)
			}
		})
	}
}

// TestEvict: past the cache's cap the least recently used image goes.
func TestEvict(t *testing.T) {
	s, _ := testStore(t, Limits{})
	s.opts.MaxBytes = 3 << 20
	mb := make([]byte, 2<<20)
	a, err := s.add(context.Background(), "test/a", imageOf(t, tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "a", Mode: 0o644, Size: int64(len(mb))}, body: mb})), nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	b, err := s.add(context.Background(), "test/b", imageOf(t, tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "b", Mode: 0o644, Size: int64(len(mb))}, body: mb})), nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := s.List()
	if len(all) != 1 || all[0].Digest != b.Digest {
		t.Errorf("after a pull past the cap: %d images, want only the newest (%s, not %s)", len(all), b.Digest, a.Digest)
	}

	// An image a sandbox holds is neither evicted nor removed.
	release, err := s.Hold(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.add(context.Background(), "test/c", imageOf(t, tarOf(t, ent{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "c", Mode: 0o644, Size: int64(len(mb))}, body: mb})), nil)
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := s.List(); len(all) != 2 {
		t.Errorf("a held image was evicted: %d images left", len(all))
	}
	if err := s.Remove("test/b"); !errors.Is(err, ErrInUse) {
		t.Errorf("remove a held image: %v, want ErrInUse", err)
	}
	// Each sandbox holds it on its own (the daemon releases a sandbox's
	// hold when it ends): one release leaves the other's.
	release2, err := s.Hold(b)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := s.Remove("test/b"); !errors.Is(err, ErrInUse) {
		t.Errorf("remove an image a second sandbox holds: %v, want ErrInUse", err)
	}
	release2()
	if err := s.Remove("test/b"); err != nil {
		t.Errorf("remove once released: %v", err)
	}
	if all, _ := s.List(); len(all) != 1 || all[0].Digest != c.Digest {
		t.Errorf("after rm: %+v", all)
	}
}
