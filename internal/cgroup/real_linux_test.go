package cgroup

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// Tests against this host's real cgroup v1 hierarchy. Every group is
// airlock-test-<random> directly below each hierarchy's root, and is
// killed and removed when the test ends, whatever happened.

// realGroup returns the host's hierarchy and a fresh group, not yet created.
func realGroup(t *testing.T) (*Hierarchy, *Group) {
	t.Helper()
	testcap.Require(t, "root", "cgroupv1")
	h, err := Detect()
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if h.V2 {
		testcap.SkipOrFail(t, "cgroupv1", "Detect chose the unified hierarchy on this host")
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	g := h.Open("airlock-test-" + hex.EncodeToString(b[:]))
	t.Cleanup(func() {
		if err := g.Kill(5 * time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := g.Remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return h, g
}

// exit is a started process's end: done is closed once it was waited for.
type exit struct {
	done chan struct{}
	err  error
}

// wait waits for cmd in the background.
func wait(cmd *exec.Cmd) *exit {
	e := &exit{done: make(chan struct{})}
	go func() { e.err = cmd.Wait(); close(e.done) }()
	return e
}

// startIn starts argv and moves it into g. The process is killed and
// waited for when the test ends.
func startIn(t *testing.T, g *Group, argv ...string) (*exec.Cmd, *exit) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := wait(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-e.done:
		case <-time.After(5 * time.Second):
			t.Errorf("pid %d did not exit after SIGKILL", cmd.Process.Pid)
		}
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	return cmd, e
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// cgroupsOf reads /proc/pid/cgroup as controller → path.
func cgroupsOf(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

func TestRealDetect(t *testing.T) {
	h, _ := realGroup(t)
	files := map[string]string{
		"memory": "memory.limit_in_bytes", "pids": "pids.max", "cpu": "cpu.cfs_quota_us",
		"cpuacct": "cpuacct.usage", "freezer": "freezer.state",
	}
	for c, f := range files {
		// The root group has no pids.max or freezer.state; a child has.
		dir := h.Mounts[c]
		if dir == "" {
			t.Errorf("no mount for %s", c)
			continue
		}
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s mount %s: %v", c, dir, err)
		}
		if c == "memory" || c == "cpu" || c == "cpuacct" {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s mount %s has no %s: %v", c, dir, f, err)
			}
		}
	}
}

func TestRealLifecycle(t *testing.T) {
	h, g := realGroup(t)
	if g.Exists() {
		t.Fatal("the test group exists before Create")
	}
	if err := g.Create(); err != nil {
		t.Fatalf("Create: %v", err)
	}
	for _, c := range V1Controllers {
		if fi, err := os.Stat(g.Path(c)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", g.Path(c), err)
		}
	}

	// Limits, read back from the kernel.
	if err := g.Set(Limits{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 16}); err != nil {
		t.Fatalf("Set: %v", err)
	}
	want := map[string]string{
		"memory/memory.limit_in_bytes": "67108864",
		"memory/memory.swappiness":     "0",
		"cpu/cpu.cfs_period_us":        "100000",
		"cpu/cpu.cfs_quota_us":         "50000",
		"pids/pids.max":                "16",
	}
	if _, err := os.Stat(filepath.Join(g.Path("memory"), "memory.memsw.limit_in_bytes")); err == nil {
		want["memory/memory.memsw.limit_in_bytes"] = "67108864"
	}
	for k, v := range want {
		c, f, _ := strings.Cut(k, "/")
		if got := readTrim(t, filepath.Join(g.Path(c), f)); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	// Delegation changes owners on the real file system too.
	if err := g.Delegate(4242, 4343); err != nil {
		t.Fatalf("Delegate: %v", err)
	}
	for _, c := range V1Controllers {
		for _, f := range []string{"", "cgroup.procs", "tasks"} {
			var st unix.Stat_t
			p := filepath.Join(g.Path(c), f)
			if err := unix.Lstat(p, &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != 4242 || st.Gid != 4343 {
				t.Errorf("%s owned by %d:%d after Delegate", p, st.Uid, st.Gid)
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(g.Path("memory"), "memory.limit_in_bytes"), &st); err != nil || st.Uid != 0 {
		t.Errorf("memory.limit_in_bytes owned by %d (%v): limits must stay root's", st.Uid, err)
	}

	// A process in the group and one in a child group.
	child := g.Child("x1")
	if err := child.Create(); err != nil {
		t.Fatal(err)
	}
	cmd, exited := startIn(t, g, "sleep", "100")
	cmd2, exited2 := startIn(t, child, "sleep", "100")
	cg := cgroupsOf(t, cmd.Process.Pid)
	for _, c := range V1Controllers {
		if cg[c] != "/"+g.rel {
			t.Errorf("/proc/%d/cgroup: %s is %q, want /%s", cmd.Process.Pid, c, cg[c], g.rel)
		}
	}
	if got := cgroupsOf(t, cmd2.Process.Pid)["pids"]; got != "/"+g.rel+"/x1" {
		t.Errorf("child process is in %q", got)
	}
	pids, err := g.Procs()
	slices.Sort(pids)
	wantPids := []int{cmd.Process.Pid, cmd2.Process.Pid}
	slices.Sort(wantPids)
	if err != nil || !reflect.DeepEqual(pids, wantPids) {
		t.Errorf("Procs() = %v, %v, want %v", pids, err, wantPids)
	}
	if kids, err := g.Children(); err != nil || !reflect.DeepEqual(kids, []string{"x1"}) {
		t.Errorf("Children() = %v, %v", kids, err)
	}
	if _, err := g.Stats(); err != nil {
		t.Errorf("Stats: %v", err)
	}

	// Kill empties the group and its child.
	start := time.Now()
	if err := g.Kill(5 * time.Second); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	for i, e := range []*exit{exited, exited2} {
		select {
		case <-e.done:
			var ee *exec.ExitError
			if !errors.As(e.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("process %d ended with %v, want SIGKILL", i, e.err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("process %d still runs after Kill", i)
		}
	}
	t.Logf("Kill took %v", time.Since(start))
	if pids, err := g.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("Procs() after Kill = %v, %v", pids, err)
	}
	if s := readTrim(t, filepath.Join(g.Path("freezer"), "freezer.state")); s != "THAWED" {
		t.Errorf("freezer.state after Kill = %q, want THAWED", s)
	}

	// Remove deletes the group and its child in every hierarchy.
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if g.Exists() {
		t.Error("Exists() after Remove")
	}
	for _, root := range h.roots() {
		if _, err := os.Stat(filepath.Join(root, g.rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Remove: %v", filepath.Join(root, g.rel), err)
		}
	}
}

func TestRealRemoveBusy(t *testing.T) {
	_, g := realGroup(t)
	if err := g.Create(); err != nil {
		t.Fatal(err)
	}
	// The process is in the pids hierarchy only, so that one rmdir waits
	// out Remove's retries, not five.
	cmd := exec.Command("sleep", "100")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := wait(cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-e.done })
	if err := os.WriteFile(filepath.Join(g.Path("pids"), "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err == nil {
		t.Fatal("Remove of a group with a live process succeeded")
	} else if !errors.Is(err, unix.EBUSY) {
		t.Errorf("Remove = %v, want EBUSY", err)
	}
	if _, err := os.Stat(g.Path("pids")); err != nil {
		t.Errorf("the busy group is gone: %v", err)
	}
	if _, err := os.Stat(g.Path("memory")); err == nil {
		t.Error("Remove gave up on the hierarchies where the group was empty")
	}
	if err := g.Kill(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Errorf("Remove after Kill: %v", err)
	}
	if g.Exists() {
		t.Error("Exists() after Remove")
	}
}

func TestRealKillForkLoop(t *testing.T) {
	_, g := realGroup(t)
	if err := g.Create(); err != nil {
		t.Fatal(err)
	}
	// The pids limit keeps the loop from hurting the host.
	if err := g.Set(Limits{Pids: 32}); err != nil {
		t.Fatal(err)
	}
	// Orphans of the loop come to this process, which reaps them, rather
	// than to a PID 1 that may not.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		reapAll()
	})

	// The loop waits for a line on stdin, so that it forks only once it
	// is in the group.
	cmd := exec.Command("sh", "-c", "read x; while :; do sleep 10 & done")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := wait(cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited.done
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, _ := g.Procs()
		s, _ := g.Stats()
		if len(pids) >= 20 && s.PidsMax > 0 {
			t.Logf("%d processes, %d forks refused", len(pids), s.PidsMax)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fork loop did not fill the group: %d processes, %d forks refused", len(pids), s.PidsMax)
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	if err := g.Kill(5 * time.Second); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("Kill took %v", time.Since(start))
	if pids, err := g.Procs(); err != nil || len(pids) != 0 {
		t.Fatalf("Procs() after Kill = %v, %v", pids, err)
	}
	select {
	case <-exited.done:
	case <-time.After(2 * time.Second):
		t.Fatal("the loop's shell still runs after Kill")
	}
	reapAll()
	if err := g.Remove(); err != nil {
		t.Errorf("Remove: %v", err)
	}
}

// reapAll reaps every exited child that nothing else waits for.
func reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
