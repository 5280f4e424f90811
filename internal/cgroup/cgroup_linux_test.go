package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// Fake-tree tests that need Linux: ownership, rmdir, signals.

func TestDelegate(t *testing.T) {
	testcap.Require(t, "root")
	const uid, gid = 123456, 654321
	owner := func(t *testing.T, p string) (int, int) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return int(st.Uid), int(st.Gid)
	}
	check := func(t *testing.T, dir string, delegated, kept []string) {
		t.Helper()
		for _, f := range delegated {
			if u, g := owner(t, filepath.Join(dir, f)); u != uid || g != gid {
				t.Errorf("%s is owned by %d:%d, want %d:%d", filepath.Join(dir, f), u, g, uid, gid)
			}
		}
		for _, f := range kept {
			if u, g := owner(t, filepath.Join(dir, f)); u != 0 || g != 0 {
				t.Errorf("%s is owned by %d:%d, want it left to root", filepath.Join(dir, f), u, g)
			}
		}
	}
	for _, comount := range []bool{false, true} {
		t.Run("v1 co-mounted="+strconv.FormatBool(comount), func(t *testing.T) {
			h, _ := fakeV1(t, comount)
			g := h.Open("airlock/sb/workload")
			if err := g.Create(); err != nil {
				t.Fatal(err)
			}
			kernelFiles(t, g)
			if err := g.Delegate(uid, gid); err != nil {
				t.Fatalf("Delegate: %v", err)
			}
			for _, root := range h.roots() {
				dir := filepath.Join(root, "airlock/sb/workload")
				check(t, dir, []string{".", "cgroup.procs", "tasks"}, nil)
				check(t, root, nil, []string{"airlock/sb", "airlock", "cgroup.procs"})
			}
			check(t, g.Path("memory"), nil, []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness"})
			check(t, g.Path("pids"), nil, []string{"pids.max"})
			check(t, g.Path("cpu"), nil, []string{"cpu.cfs_quota_us"})
			check(t, g.Path("freezer"), nil, []string{"freezer.state"})
			// DelegateProcs is for v2 only.
			if err := g.DelegateProcs(uid, gid); err != nil {
				t.Errorf("DelegateProcs on v1: %v", err)
			}
			check(t, h.Open("airlock/sb").Path("memory"), nil, []string{"."})
		})
	}
	t.Run("v2", func(t *testing.T) {
		h, root := fakeV2(t)
		parent := h.Open("sb")
		if err := parent.Create(); err != nil {
			t.Fatal(err)
		}
		kernelFiles(t, parent)
		g := parent.Child("workload")
		if err := g.Create(); err != nil {
			t.Fatal(err)
		}
		kernelFiles(t, g, "cgroup.threads") // a missing file is no error
		if err := g.Delegate(uid, gid); err != nil {
			t.Fatalf("Delegate: %v", err)
		}
		dir := filepath.Join(root, "sb/workload")
		check(t, dir, []string{".", "cgroup.procs", "cgroup.subtree_control"}, []string{"memory.max", "pids.max", "cpu.max", "cgroup.kill", "memory.swap.max"})
		check(t, filepath.Join(root, "sb"), nil, []string{".", "cgroup.procs"})
		if err := parent.DelegateProcs(uid, gid); err != nil {
			t.Fatalf("DelegateProcs: %v", err)
		}
		check(t, filepath.Join(root, "sb"), []string{"cgroup.procs"}, []string{".", "cgroup.subtree_control", "memory.max"})
	})
	t.Run("missing group", func(t *testing.T) {
		h, _ := fakeV1(t, false)
		if err := h.Open("nope").Delegate(uid, gid); err == nil || !strings.Contains(err.Error(), "delegate cgroup nope") {
			t.Errorf("Delegate of a missing group = %v", err)
		}
		h2, _ := fakeV2(t)
		if err := h2.Open("nope").DelegateProcs(uid, gid); err == nil {
			t.Error("DelegateProcs of a missing group succeeded")
		}
	})
}

func TestRemoveFake(t *testing.T) {
	// On a fake tree rmdir removes only empty directories, so the groups
	// here hold no control files (a real cgroup directory is removable
	// with its control files in it; see the real-hierarchy tests).
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (*Hierarchy, string)
	}{
		{"v1 separate", func(t *testing.T) (*Hierarchy, string) { return fakeV1(t, false) }},
		{"v1 co-mounted", func(t *testing.T) (*Hierarchy, string) { return fakeV1(t, true) }},
		{"v2", fakeV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, base := tc.setup(t)
			before := listTree(t, base)
			sb := h.Open("airlock/sb-1")
			for _, rel := range []string{"agent", "workload/x1", "workload/x2/deep", "workload/x3"} {
				mkGroup(t, sb.Child(rel))
			}
			other := h.Open("airlock/sb-2")
			mkGroup(t, other)
			if err := sb.Remove(); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if sb.Exists() {
				t.Error("Exists() after Remove")
			}
			if !other.Exists() {
				t.Error("Remove removed a sibling")
			}
			if err := other.Remove(); err != nil {
				t.Fatal(err)
			}
			if err := h.Open("airlock").Remove(); err != nil {
				t.Fatal(err)
			}
			if got := listTree(t, base); !reflect.DeepEqual(got, before) {
				t.Errorf("tree after Remove:\n got %q\nwant %q", got, before)
			}
			// Removing what is not there is no error.
			if err := sb.Remove(); err != nil {
				t.Errorf("second Remove: %v", err)
			}
		})
	}
}

func TestRemoveFakeNotEmpty(t *testing.T) {
	h, _ := fakeV1(t, false)
	g := h.Open("sb")
	if err := g.Child("workload").Create(); err != nil {
		t.Fatal(err)
	}
	// A file in one hierarchy keeps that hierarchy's group.
	writeFiles(t, g.Child("workload").Path("pids"), map[string]string{"stuck": ""})
	err := g.Remove()
	if err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	if !strings.Contains(err.Error(), filepath.Join(g.Path("pids"), "workload")) {
		t.Errorf("error %q does not name the directory", err)
	}
	// The other hierarchies were still cleaned.
	for _, c := range []string{"memory", "cpu", "cpuacct", "freezer"} {
		if _, err := os.Stat(g.Path(c)); err == nil {
			t.Errorf("%s: group left although it was removable", c)
		}
	}
}

func TestKillEmptyReturnsEarly(t *testing.T) {
	t.Run("v1", func(t *testing.T) {
		h, _ := fakeV1(t, false)
		g := h.Open("airlock/sb")
		mkGroup(t, g)
		kernelFiles(t, g)
		mkGroup(t, g.Child("workload/x1"))
		writeFiles(t, g.Child("workload/x1").Path("pids"), map[string]string{"cgroup.procs": ""})
		// A freeze would write FROZEN, and the thaw THAWED.
		writeFiles(t, g.Path("freezer"), map[string]string{"freezer.state": "SENTINEL"})
		start := time.Now()
		if err := g.Kill(5 * time.Second); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Kill of an empty group took %v", d)
		}
		if got := readFile(t, filepath.Join(g.Path("freezer"), "freezer.state")); got != "SENTINEL" {
			t.Errorf("freezer.state = %q: Kill froze an empty group", got)
		}
	})
	t.Run("v2", func(t *testing.T) {
		h, _ := fakeV2(t)
		g := h.Open("sb")
		mkGroup(t, g)
		kernelFiles(t, g)
		if err := g.Kill(5 * time.Second); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if got := readFile(t, filepath.Join(g.Path("pids"), "cgroup.kill")); got != "" {
			t.Errorf("cgroup.kill = %q: Kill wrote to an empty group", got)
		}
	})
	t.Run("missing group", func(t *testing.T) {
		h, _ := fakeV1(t, true)
		if err := h.Open("nope").Kill(time.Second); err != nil {
			t.Errorf("Kill of a missing group = %v", err)
		}
	})
	t.Run("only spared processes", func(t *testing.T) {
		// The group lists a live process that is spared: Kill must neither
		// kill it nor wait for it.
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		h, _ := fakeV1(t, false)
		g := h.Open("sb")
		mkGroup(t, g)
		kernelFiles(t, g)
		writeFiles(t, g.Path("pids"), map[string]string{"cgroup.procs": strconv.Itoa(pid) + "\n"})
		writeFiles(t, g.Path("freezer"), map[string]string{"freezer.state": "SENTINEL"})
		start := time.Now()
		if err := g.Kill(3*time.Second, pid); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Kill waited %v for a spared process", d)
		}
		if err := unix.Kill(pid, 0); err != nil {
			t.Errorf("the spared process is gone: %v", err)
		}
		if got := readFile(t, filepath.Join(g.Path("freezer"), "freezer.state")); got != "SENTINEL" {
			t.Errorf("freezer.state = %q", got)
		}
	})
}
