package agentd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/fsroot"
)

// TestRecoverRestoresThreadsOnlyWhenLeft: under gVisor (file operations on
// the workload's threads) an agent's start looks for a restore an earlier
// agent left without starting those threads, and starts them only to
// finish or remove one. A root that is a symlink is not followed.
func TestRecoverRestoresThreadsOnlyWhenLeft(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// /tmp points outside the root, at a staging directory: not followed.
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(outside, stagingPrefix+"x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "tmp")); err != nil {
		t.Fatal(err)
	}
	r, err := fsroot.Open(root, -1, -1, "/")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := &server{root: r, ids: &idThreads{uid: os.Getuid(), gid: os.Getgid()}, snap: newSnapState()}
	if left, err := s.restoresLeft(); err != nil || left {
		t.Fatalf("restoresLeft with nothing left = %v, %v; want false", left, err)
	}
	if err := s.recoverRestores(); err != nil {
		t.Fatal(err)
	}
	if s.ids.jobs != nil {
		t.Fatal("the workload's threads were started with no restore to recover")
	}

	staged := filepath.Join(ws, stagingPrefix+"abc")
	if err := os.Mkdir(staged, 0o700); err != nil {
		t.Fatal(err)
	}
	if left, err := s.restoresLeft(); err != nil || !left {
		t.Fatalf("restoresLeft with a staging directory = %v, %v; want true", left, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the workload's threads need root to take on a uid")
	}
	if err := s.recoverRestores(); err != nil {
		t.Fatal(err)
	}
	if s.ids.jobs == nil {
		t.Error("a restore was left but the workload's threads were not started")
	}
	// Not committed (no journal): the staging directory is removed.
	if _, err := os.Stat(staged); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the uncommitted restore's staging directory is still there: %v", err)
	}
}
