package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestCached: a product is built once into a temporary directory that
// then takes its name; a second caller waits for the first and finds it;
// a failed build leaves nothing.
func TestCached(t *testing.T) {
	dir := t.TempDir()
	var builds int
	var mu sync.Mutex
	build := func(tmp string) error {
		mu.Lock()
		builds++
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		return os.WriteFile(filepath.Join(tmp, "f"), []byte("x"), 0o644)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			p, err := cached(context.Background(), dir, "k", build)
			if err != nil || p != filepath.Join(dir, "k") {
				t.Errorf("cached: %q, %v", p, err)
			}
		})
	}
	wg.Wait()
	if builds != 1 {
		t.Errorf("built %d times, want once", builds)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "k", "f")); err != nil || string(b) != "x" {
		t.Errorf("product: %q, %v", b, err)
	}
	boom := errors.New("boom")
	if _, err := cached(context.Background(), dir, "bad", func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("a failed build: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && e.Name() != "k" {
			t.Errorf("left in the cache: %s", e.Name())
		}
	}
}

// TestPruneCache: products nobody used for the keep time go, build
// directories a dead builder left and the locks of products that are gone
// go after a day; what was used lately, and its lock, stay.
func TestPruneCache(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-30 * 24 * time.Hour)
	for name, age := range map[string]time.Time{
		"fresh": time.Now(), "stale": old, ".x.tmp-1": time.Now().Add(-48 * time.Hour), ".y.tmp-2": time.Now(),
	} {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, age, age); err != nil {
			t.Fatal(err)
		}
	}
	for _, lock := range []string{".k.lock", ".gone.lock", ".fresh.lock"} {
		if err := os.WriteFile(filepath.Join(dir, lock), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(dir, lock), old, old); err != nil {
			t.Fatal(err)
		}
	}
	touch(filepath.Join(dir, "fresh"))
	pruneCache(dir, cacheKeep, 0)
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{".fresh.lock", ".y.tmp-2", "fresh"}; !slices.Equal(left, want) {
		t.Errorf("after pruning: %v, want %v", left, want)
	}
}

// TestPruneCacheCount: beyond keepN products, the least recently used go,
// whatever their age.
func TestPruneCacheCount(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		p := filepath.Join(dir, fmt.Sprint("p", i))
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		used := time.Now().Add(-time.Duration(i) * time.Hour)
		if err := os.Chtimes(p, used, used); err != nil {
			t.Fatal(err)
		}
	}
	touch(filepath.Join(dir, "p4"))
	pruneCache(dir, cacheKeep, 3)
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"p0", "p1", "p4"}; !slices.Equal(left, want) {
		t.Errorf("after pruning to 3: %v, want %v", left, want)
	}
}

// TestPruneCachePinned: a product a paused machine pinned stays however
// old or many the others; unpinned, it goes; a pin past pinKeep is
// removed and keeps nothing.
func TestPruneCachePinned(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * cacheKeep)
	for _, name := range []string{"root", "stale", "other"} {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "root.img"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(dir, "root", "root.img")
	if err := pinProducts("sb-1", img); err != nil {
		t.Fatal(err)
	}
	stalePin := pinPath(filepath.Join(dir, "stale", "root.img"), "sb-2")
	if err := pinProducts("sb-2", filepath.Join(dir, "stale", "root.img")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(stalePin, time.Now().Add(-pinKeep-time.Hour), time.Now().Add(-pinKeep-time.Hour)); err != nil {
		t.Fatal(err)
	}
	pruneCache(dir, cacheKeep, 0)
	pruneCache(dir, cacheKeep, 0) // the stale pin went the first time
	if _, err := os.Stat(img); err != nil {
		t.Errorf("a paused machine's root image was pruned: %v", err)
	}
	for _, gone := range []string{"stale", "other"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived its age: %v", gone, err)
		}
	}
	unpinProducts("sb-1", img)
	pruneCache(dir, cacheKeep, 0)
	if _, err := os.Stat(img); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root image outlived its unpin: %v", err)
	}
}
