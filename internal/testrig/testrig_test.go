package testrig

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTailLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\n\n\nb\n\n", 5, "a\nb"},
		{"", 3, "(the log is empty)"},
		{"only", 1, "only"},
	} {
		if got := TailLines([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("TailLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := Tail(filepath.Join(t.TempDir(), "none"), 3); !strings.HasPrefix(got, "(no log:") {
		t.Errorf("Tail(missing) = %q", got)
	}
}

// TestAcquire: a second holder waits, gives up when its context ends with
// an error naming the holder, and gets the lock once it is released.
func TestAcquire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "lock")
	first, err := Acquire(context.Background(), path, "the thing")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Acquire(ctx, path, "the thing")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the thing is in use by process") {
		t.Fatalf("Acquire while held = %v", err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := Acquire(context.Background(), path, "the thing")
		if err == nil {
			l.Unlock()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	first.Unlock()
	first.Unlock() // twice is fine
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the released lock")
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv(EnvCache, "")
	if CacheDir() != DefaultCacheDir {
		t.Errorf("CacheDir() = %s", CacheDir())
	}
	t.Setenv(EnvCache, "/elsewhere")
	if CacheDir() != "/elsewhere" {
		t.Errorf("CacheDir() = %s", CacheDir())
	}
}
