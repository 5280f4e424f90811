package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CacheEnv names the variable that moves airlock's cache of heavy build
// products (kernels, initramfs images, root images, snapshots) away from
// /var/cache/airlock.
const CacheEnv = "AIRLOCK_CACHE"

// defaultCache is the cache's root when neither Options.CacheDir nor
// CacheEnv says otherwise.
const defaultCache = "/var/cache/airlock"

// cacheRoot returns the microvm part of the cache.
func cacheRoot(dir string) string {
	if dir == "" {
		dir = os.Getenv(CacheEnv)
	}
	if dir == "" {
		dir = defaultCache
	}
	return filepath.Join(dir, "microvm")
}

// contentKey names a build product by what it is made of: the first 16
// hex digits of the SHA-256 of parts as JSON.
func contentKey(parts ...any) string {
	b, err := json.Marshal(parts)
	if err != nil {
		panic(err) // only plain values are keyed
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// cached returns dir/name, building it first when it is not there: build
// fills a temporary directory next to it, which then takes its name, so
// that nobody ever sees a half-built product. A lock file serializes the
// builders of one name across processes; a second builder waits and finds
// the first one's product. Everything in the cache is readable by all
// (QEMU reads the kernel, initramfs and root image as an unprivileged
// user) unless build makes it otherwise.
func cached(ctx context.Context, dir, name string, build func(tmp string) error) (string, error) {
	final := filepath.Join(dir, name)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make the cache directory %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, "."+name+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	tmp, err := os.MkdirTemp(dir, "."+name+".tmp-")
	if err != nil {
		return "", fmt.Errorf("make a build directory in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := build(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("publish %s in the cache: %w", name, err)
	}
	pruneCache(dir, cacheKeep, cacheKeepN[filepath.Base(dir)])
	return final, nil
}

// cacheKeep is how long a build product nobody used stays in the cache:
// kernels, initramfs and root images and snapshots of older agents,
// packages and templates go after it.
const cacheKeep = 14 * 24 * time.Hour

// cacheKeepN bounds the snapshots by number as well: a machine that builds
// many agents (a developer's, CI's) makes a snapshot per agent build, about
// 150 MB each, and the least recently used beyond this many go at once.
// The other products are bounded by age only: a paused machine still needs
// the kernel, initramfs and root image it was started from, however many
// were built since.
var cacheKeepN = map[string]int{"snapshot": 8}

// touch marks the cached product at path as used now (its directory's
// modification time), so that pruneCache keeps it.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// pruneCache removes the products in dir that nobody used for keep (see
// touch), and, when keepN is above 0, the least recently used beyond the
// newest keepN. A machine
// still running from a removed snapshot is not affected (its memory is its
// own); a later start finds none and boots.
func pruneCache(dir string, keep time.Duration, keepN int) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type product struct {
		name string
		used time.Time
	}
	var kept []product
	for _, e := range ents {
		name := e.Name()
		if lock, ok := strings.CutSuffix(name, ".lock"); ok && name[0] == '.' {
			// The lock of a product that is gone, unused for a day.
			if _, err := os.Stat(filepath.Join(dir, lock[1:])); errors.Is(err, os.ErrNotExist) {
				if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
					_ = os.Remove(filepath.Join(dir, name))
				}
			}
			continue
		}
		if !e.IsDir() || (name[0] == '.' && !strings.Contains(name, ".tmp-")) {
			continue
		}
		// A build directory left by a builder that died is a day old at
		// most while anyone could still be filling it.
		limit := keep
		if name[0] == '.' {
			limit = 24 * time.Hour
		}
		fi, err := e.Info()
		if err != nil || (name[0] != '.' && pinned(dir, name)) {
			continue // a paused machine's (cachepin_linux.go)
		}
		if time.Since(fi.ModTime()) > limit {
			_ = os.RemoveAll(filepath.Join(dir, name))
		} else if name[0] != '.' {
			kept = append(kept, product{name, fi.ModTime()})
		}
	}
	if keepN <= 0 {
		return
	}
	slices.SortFunc(kept, func(a, b product) int { return b.used.Compare(a.used) })
	for _, p := range kept[min(keepN, len(kept)):] {
		_ = os.RemoveAll(filepath.Join(dir, p.name))
	}
}

// lockFile takes an exclusive lock on path, waiting for it until ctx is
// done, and returns what releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for another airlock building %s: %w", filepath.Base(path), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
