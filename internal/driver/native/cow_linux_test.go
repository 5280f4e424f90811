package native

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestSweepCowLayers: the layer of a sandbox whose airlock died without
// tearing it down (its tmpfs still mounted) goes at the next sweep; one
// with an interrupted apply's journal is kept until RecoverCow reads it.
func TestSweepCowLayers(t *testing.T) {
	requireNative(t)
	testcap.Require(t, "overlay")
	// The host's state directory: a sweep judges every sandbox cgroup by
	// its lock there (another directory would make live sandboxes of
	// other processes look stale). The ids below are the test's own.
	d := newDriver(t)
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := cow.LayerDir(d.rc.StateDir, "sb-cowtest-stale", 0)
	_, f, err := cow.Make(t.Context(), stale, "sb-cowtest-stale", sandbox.Mount{Source: project, Target: "/w", Cow: true}, 1<<20, cow.IDMap{})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	journaled := cow.LayerDir(d.rc.StateDir, "sb-cowtest-crashed", 0)
	if _, f, err = cow.Make(t.Context(), journaled, "sb-cowtest-crashed", sandbox.Mount{Source: project, Target: "/w", Cow: true}, 1<<20, cow.IDMap{}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(journaled, "journal.json"), []byte(`{"sandbox":"sb-cowtest-crashed","source":"`+project+`","target":"/w","plan":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale layer is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(journaled, "journal.json")); err != nil {
		t.Errorf("the sweep removed a journal before it was read: %v", err)
	}
	rs, err := d.RecoverCow()
	if err != nil || !slices.ContainsFunc(rs, func(r cow.Recovery) bool { return r.Sandbox == "sb-cowtest-crashed" }) {
		t.Fatalf("RecoverCow: %+v %v", rs, err)
	}
	if err := d.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(journaled); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the recovered layer is left: %v", err)
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(b), "sb-cowtest-") {
		t.Errorf("mounts of the test's layers left")
	}
}
