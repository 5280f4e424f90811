package native

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestSweepSessionsPersistentOnly: a one-shot run's sweep leaves the
// session sockets of dead persistent sandboxes to the daemons (it has none
// of its own, and checking every daemon sandbox's lock for them cost a
// one-shot run beside 2,700 live sandboxes about 20-40 ms of CPU); a
// persistent driver's sweep removes them.
func TestSweepSessionsPersistentOnly(t *testing.T) {
	requireNative(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	for _, persistent := range []bool{false, true} {
		state := t.TempDir()
		// A cgroup parent of its own that does not exist: the cgroup sweep
		// of a private state dir must not look at the host's sandboxes.
		d, err := New(Options{StateDir: state, Persistent: persistent, CgroupParent: "airlock-sweeptest-" + hex.EncodeToString(b[:])})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(state, "sessions")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "sb-0123456789ab.sock") // no lock: its agent is dead
		if err := os.WriteFile(sock, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := d.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(sock)
		if gone := errors.Is(err, fs.ErrNotExist); gone != persistent {
			t.Errorf("persistent %v: after the sweep the dead sandbox's session socket is gone: %v, want %v", persistent, gone, persistent)
		}
	}
}
