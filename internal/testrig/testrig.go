// Package testrig holds what the test rigs share: where heavy builds are
// cached, a lock that serialises builds and rigs across processes, and the
// tail of a log for error messages.
//
// The rigs themselves live in subpackages: rootimage builds a Debian root
// file system for containers, kube starts a one-node Kubernetes cluster.
package testrig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// EnvCache names the variable that moves the cache of heavy builds.
const EnvCache = "AIRLOCK_CACHE"

// Where the rigs' engines keep a running cluster's or engine's state (the
// kube rig's and the Docker rig's packages use these).
const (
	KubeDir   = "/var/lib/airlock-kube"
	DockerDir = "/run/airlock-test/docker"
)

// DefaultCacheDir is where heavy builds are cached when AIRLOCK_CACHE is
// unset.
const DefaultCacheDir = "/var/cache/airlock"

// CacheDir is the directory heavy builds (binaries, images) are cached in,
// by version: $AIRLOCK_CACHE, else /var/cache/airlock.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return DefaultCacheDir
}

// Lock is an exclusive lock on a file, held by this process until Unlock.
type Lock struct {
	f *os.File
}

// pollLock is how often Acquire retries a held lock.
const pollLock = 200 * time.Millisecond

// Acquire takes the exclusive lock on path (creating the file), waiting
// while another process holds it, until ctx is done. what names the lock in
// the error ("the kube test rig"). The holder's pid is written into the
// file so that a waiter can say who holds it.
func Acquire(ctx context.Context, path, what string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create the directory of the lock for %s: %w", what, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open the lock for %s: %w", what, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s (%s): %w", path, what, err)
		}
		select {
		case <-ctx.Done():
			holder, _ := os.ReadFile(path)
			f.Close()
			return nil, fmt.Errorf("%s is in use by process %s (lock %s); wait for it to finish, or stop it: %w",
				what, strings.TrimSpace(string(holder)), path, ctx.Err())
		case <-time.After(pollLock):
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock. It may be called more than once.
func (l *Lock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}

// tailBytes bounds how much of a log Tail reads.
const tailBytes = 64 << 10

// Tail returns the last n lines of the file at path, for an error message.
// A missing or unreadable file gives a note saying so instead.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-tailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return TailLines(b, n)
}

// TailLines returns the last n non-empty lines of b.
func TailLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	var kept []string
	for i := len(lines) - 1; i >= 0 && len(kept) < n; i-- {
		if len(bytes.TrimSpace(lines[i])) == 0 {
			continue
		}
		kept = append(kept, string(lines[i]))
	}
	if len(kept) == 0 {
		return "(the log is empty)"
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	return strings.Join(kept, "\n")
}
