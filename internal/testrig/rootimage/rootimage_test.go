package rootimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	status := `Package: python3
Status: install ok installed
Priority: optional
Version: 3.11.2-1+b1

Package: removed-thing
Status: deinstall ok config-files
Version: 1.0

Package: libc6
Status: install ok installed
Version: 2.36-9+deb12u10
Description: GNU C Library
 continuation line: Version: not this`
	got, err := parseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"python3": "3.11.2-1+b1", "libc6": "2.36-9+deb12u10"}
	if len(got) != len(want) {
		t.Fatalf("parseStatus = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := parseStatus(strings.NewReader("garbage\n")); err == nil {
		t.Error("parseStatus of no package: no error")
	}
}

func TestFindEmpty(t *testing.T) {
	_, err := Find(t.TempDir(), Spec{})
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "make kube-rig") {
		t.Errorf("Find(empty) = %v, want ErrNotBuilt saying how to build", err)
	}
}

// fakeImage puts an image for spec under release key into cache.
func fakeImage(t *testing.T, cache string, spec Spec, key string, built time.Time) string {
	t.Helper()
	spec = spec.withDefaults()
	dir := filepath.Join(spec.dir(cache), key[:16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, tarballName)
	if err := os.WriteFile(tarball, []byte("not really a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := Manifest{Suite: spec.Suite, Release: key, Size: 16, SHA256: "00", Built: built, Packages: map[string]string{"python3": "3"}}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, manifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return tarball
}

// TestFindNewest: of two cached images, Find takes the newer; a torn one
// (size differs from its manifest) does not count.
func TestFindNewest(t *testing.T) {
	cache := t.TempDir()
	old := fakeImage(t, cache, Spec{}, strings.Repeat("a", 64), time.Now().Add(-time.Hour))
	newer := fakeImage(t, cache, Spec{}, strings.Repeat("b", 64), time.Now())
	img, err := Find(cache, Spec{})
	if err != nil || img.Path != newer {
		t.Fatalf("Find = %v, %v; want %s", img, err, newer)
	}
	if err := os.WriteFile(newer, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err = Find(cache, Spec{})
	if err != nil || img.Path != old {
		t.Fatalf("Find with the newer torn = %v, %v; want %s", img, err, old)
	}
	// Another spec has its own images.
	if _, err := Find(cache, Spec{Include: []string{"perl"}}); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Find(other spec) = %v, want ErrNotBuilt", err)
	}
}

// TestEnsureCached: when the mirror's release file is the one an image was
// built from, Ensure returns that image without building; when the mirror
// cannot be reached, it falls back to the newest image.
func TestEnsureCached(t *testing.T) {
	release := "Origin: Debian\nSuite: stable\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debian/dists/bookworm/InRelease" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(release))
	}))
	defer srv.Close()
	cache := t.TempDir()
	sum := sha256.Sum256([]byte(release))
	key := hex.EncodeToString(sum[:])
	want := fakeImage(t, cache, Spec{Mirror: srv.URL + "/debian"}, key, time.Now())
	ctx := context.Background()
	img, err := Ensure(ctx, cache, Spec{Mirror: srv.URL + "/debian"}, nil)
	if err != nil || img.Path != want {
		t.Fatalf("Ensure = %v, %v; want the cached %s", img, err, want)
	}
	if got := releaseDate([]byte(release)); got != "Sat, 11 Jul 2026 10:16:37 UTC" {
		t.Errorf("releaseDate = %q", got)
	}
	// The mirror is not part of the key: a mirror that fails falls back
	// to the newest image built for the suite and packages.
	var log strings.Builder
	img, err = Ensure(ctx, cache, Spec{Mirror: srv.URL + "/nowhere"}, &log)
	if err != nil || img.Path != want {
		t.Fatalf("Ensure with a failing mirror = %v, %v; want the cached %s", img, err, want)
	}
	if !strings.Contains(log.String(), "404") || !strings.Contains(log.String(), "using the image cached") {
		t.Errorf("the fallback is not logged: %q", log.String())
	}
	if _, err := Ensure(ctx, t.TempDir(), Spec{Mirror: srv.URL + "/nowhere"}, nil); err == nil || !strings.Contains(err.Error(), "no image is cached") {
		t.Errorf("Ensure with a failing mirror and no cache = %v", err)
	}
}
