package gvisor

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestEtcFingerprintChanges checks that the /etc snapshot's fingerprint
// changes with every kind of change to the allowlisted entries: a file
// rewritten in place with the same size, a symlink pointed elsewhere, an
// entry added below a directory, a mode, and that it stays the same when
// nothing changed.
func TestEtcFingerprintChanges(t *testing.T) {
	etc := t.TempDir()
	names := []string{"hosts.conf", "alternatives", "ssl", "missing"}
	if err := os.WriteFile(filepath.Join(etc, "hosts.conf"), []byte("aaaa"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"alternatives", "ssl/certs"} {
		if err := os.MkdirAll(filepath.Join(etc, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(etc, "alternatives", "editor")
	if err := os.Symlink("/usr/bin/vi", link); err != nil {
		t.Fatal(err)
	}
	fp := func() string {
		t.Helper()
		s, err := fingerprintEtc(etc, names)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	last := fp()
	if again := fp(); again != last {
		t.Fatalf("nothing changed, and the fingerprint did: %s, %s", last, again)
	}
	changes := []struct {
		what string
		do   func() error
	}{
		{"a file rewritten in place, same size", func() error {
			f, err := os.OpenFile(filepath.Join(etc, "hosts.conf"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("b"), 0)
			return err
		}},
		{"a symlink pointed elsewhere, same length", func() error {
			tmp := link + ".new"
			if err := os.Symlink("/usr/bin/ed", tmp); err != nil {
				return err
			}
			return os.Rename(tmp, link)
		}},
		{"a file added below a directory", func() error {
			return os.WriteFile(filepath.Join(etc, "ssl/certs/ca.pem"), []byte("x"), 0o644)
		}},
		{"a mode", func() error { return os.Chmod(filepath.Join(etc, "ssl/certs/ca.pem"), 0o600) }},
		{"an allowlisted entry that appears", func() error { return os.WriteFile(filepath.Join(etc, "missing"), nil, 0o644) }},
	}
	for _, c := range changes {
		// Apart in time: a rewrite in place changes only the times.
		time.Sleep(2 * time.Millisecond)
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		now := fp()
		if now == last {
			t.Errorf("%s: the fingerprint stayed %s", c.what, now)
		}
		last = now
	}
}
