package agentd

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// These tests run the restore engine on a real directory standing for the
// sandbox's root (its "workspace" subdirectory is /workspace).

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// tree is a workspace's content for the tests: path (below /workspace) to
// "file:CONTENT", "dir", or "link:TARGET", with a mode.
type node struct {
	kind, data string
	mode       uint32
}

func build(t testing.TB, dir string, tr map[string]node) {
	t.Helper()
	keys := make([]string, 0, len(tr))
	for k := range tr {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		n, p := tr[k], filepath.Join(dir, k)
		var err error
		switch n.kind {
		case "dir":
			err = os.MkdirAll(p, 0o755)
		case "file":
			err = os.WriteFile(p, []byte(n.data), 0o644)
		case "link":
			err = os.Symlink(n.data, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		if n := tr[k]; n.kind != "link" && n.mode != 0 {
			if err := os.Chmod(filepath.Join(dir, k), os.FileMode(n.mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// scanDir returns the entries of root/workspace as /workspace.
func scanDir(t testing.TB, root string) []sandbox.TreeEntry {
	t.Helper()
	fd, err := unix.Open(filepath.Join(root, "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	w := (&server{snap: newSnapState()}).newWalker(0, 0)
	if err := w.walkRoot(fd, sandbox.Workspace); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(w.entries, func(a, b sandbox.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	return w.entries
}

// same compares entries without mtimes.
func same(a, b []sandbox.TreeEntry) bool {
	strip := func(es []sandbox.TreeEntry) []sandbox.TreeEntry {
		out := make([]sandbox.TreeEntry, len(es))
		for i, e := range es {
			e.MTime = 0
			out[i] = e
		}
		return out
	}
	return slices.Equal(strip(a), strip(b))
}

// restoreJob is what the restore engine is given: the target and the
// content of its files.
type restoreJob struct {
	Root    string              `json:"root"`
	Target  []sandbox.TreeEntry `json:"target"`
	Content map[string][]byte   `json:"content"`
}

// runRestore restores root/workspace to job's target, as Apply does once
// the blobs arrived; staged is called between staging and the commit.
func runRestore(job restoreJob, staged func()) (sandbox.ApplyStats, error) {
	var stats sandbox.ApplyStats
	rootfd, err := unix.Open(job.Root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return stats, err
	}
	defer unix.Close(rootfd)
	wsfd, err := openRoot(rootfd, sandbox.Workspace)
	if err != nil {
		return stats, err
	}
	w := (&server{snap: newSnapState()}).newWalker(0, 0)
	w.inos = map[string]uint64{}
	err = w.walkRoot(wsfd, sandbox.Workspace)
	unix.Close(wsfd)
	if err != nil {
		return stats, err
	}
	slices.SortFunc(w.entries, func(a, b sandbox.TreeEntry) int { return strings.Compare(a.Path, b.Path) })
	if err := checkEntries([]string{sandbox.Workspace}, job.Target); err != nil {
		return stats, err
	}
	p := plan(sandbox.Workspace, w.entries, w.inos, job.Target, &stats)
	tok, _ := randomToken()
	if err := p.open(rootfd, tok); err != nil {
		return stats, err
	}
	defer closeFD(&p.fd)
	defer closeFD(&p.stage)
	idx := map[string]int{}
	for _, e := range p.puts {
		if e.Type == sandbox.EntryFile {
			if _, ok := idx[e.Digest]; !ok {
				idx[e.Digest] = len(idx)
				if err := os.WriteFile(fmt.Sprintf("/proc/self/fd/%d/b-%d", p.stage, idx[e.Digest]), job.Content[e.Digest], 0o600); err != nil {
					discard([]*rootPlan{p})
					return stats, roomError(err)
				}
			}
		}
	}
	if err := p.stagePuts(p.stage, idx); err != nil {
		discard([]*rootPlan{p})
		return stats, err
	}
	if staged != nil {
		staged()
	}
	return stats, commit([]*rootPlan{p})
}

// randomTree makes a tree of about n entries.
func randomTree(r *rand.Rand, n int) map[string]node {
	tr := map[string]node{}
	dirs := []string{""}
	for i := range n {
		parent := dirs[r.IntN(len(dirs))]
		name := parent + "n" + strconv.Itoa(i)
		if parent != "" {
			name = parent + "/n" + strconv.Itoa(i)
		}
		switch r.IntN(6) {
		case 0:
			tr[name] = node{kind: "dir", mode: []uint32{0o755, 0o700, 0o750}[r.IntN(3)]}
			dirs = append(dirs, name)
		case 1:
			tr[name] = node{kind: "link", data: []string{"../x", "/etc/passwd", name, "n1"}[r.IntN(4)]}
		default:
			tr[name] = node{kind: "file", data: strings.Repeat(strconv.Itoa(r.IntN(5)), r.IntN(3000)), mode: []uint32{0o644, 0o600, 0o755}[r.IntN(3)]}
		}
	}
	return tr
}

// target scans tr built in a scratch directory, and collects its content.
func target(t testing.TB, tr map[string]node) ([]sandbox.TreeEntry, map[string][]byte) {
	t.Helper()
	scratch := t.TempDir()
	if err := os.Mkdir(filepath.Join(scratch, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, filepath.Join(scratch, "workspace"), tr)
	entries := scanDir(t, scratch)
	content := map[string][]byte{}
	for _, e := range entries {
		if e.Type == sandbox.EntryFile {
			b, err := os.ReadFile(filepath.Join(scratch, strings.TrimPrefix(e.Path, "/")))
			if err != nil {
				t.Fatal(err)
			}
			content[e.Digest] = b
		}
	}
	return entries, content
}

func newRoot(t testing.TB, tr map[string]node) string {
	t.Helper()
	root := t.TempDir()
	ws := filepath.Join(root, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	build(t, ws, tr)
	return root
}

func TestRestoreMakesTheTreeExactlyTheSnapshot(t *testing.T) {
	tests := []struct {
		name           string
		before, after  map[string]node
		added, removed int
	}{
		{"empty to files", nil, map[string]node{"a": {kind: "file", data: "x"}, "d": {kind: "dir"}, "d/b": {kind: "file", data: "y", mode: 0o600}}, 3, 0},
		{"files to empty", map[string]node{"a": {kind: "file", data: "x"}, "d": {kind: "dir"}, "d/b": {kind: "file", data: "y"}}, nil, 0, 3},
		{"dir becomes file", map[string]node{"d": {kind: "dir"}, "d/b": {kind: "file", data: "y"}}, map[string]node{"d": {kind: "file", data: "now a file"}}, 0, 1},
		{"file becomes dir", map[string]node{"d": {kind: "file", data: "f"}}, map[string]node{"d": {kind: "dir"}, "d/e": {kind: "link", data: "../d"}}, 1, 0},
		{"modes and links", map[string]node{"a": {kind: "file", data: "x", mode: 0o600}, "l": {kind: "link", data: "a"}, "ro": {kind: "dir", mode: 0o555}},
			map[string]node{"a": {kind: "file", data: "x", mode: 0o755}, "l": {kind: "link", data: "elsewhere"}, "ro": {kind: "dir", mode: 0o555}, "ro/new": {kind: "file", data: "in a read-only dir"}}, 1, 0},
		{"same content twice", nil, map[string]node{"a": {kind: "file", data: "dup"}, "b": {kind: "file", data: "dup"}, "c": {kind: "file", data: "dup", mode: 0o600}}, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, content := target(t, tt.after)
			root := newRoot(t, tt.before)
			stats, err := runRestore(restoreJob{Root: root, Target: want, Content: content}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := scanDir(t, root); !same(got, want) {
				t.Fatalf("after the restore:\n%v\nwant\n%v", got, want)
			}
			if stats.Added != tt.added || stats.Removed != tt.removed {
				t.Errorf("stats %+v, want %d added and %d removed", stats, tt.added, tt.removed)
			}
			// Files get their mtime back; nothing of the staging is left.
			ents, _ := os.ReadDir(filepath.Join(root, "workspace"))
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), stagingPrefix) {
					t.Errorf("staging directory %s left behind", e.Name())
				}
			}
		})
	}
}

func TestRestoreOutOfRoomLeavesTheTreeAsItWas(t *testing.T) {
	testcapRoot(t)
	root := t.TempDir()
	ws := filepath.Join(root, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	defer unix.Unmount(ws, unix.MNT_DETACH)
	build(t, ws, map[string]node{"keep": {kind: "file", data: strings.Repeat("k", 600<<10)}})
	before := scanDir(t, root)
	want, content := target(t, map[string]node{"big": {kind: "file", data: strings.Repeat("b", 700<<10)}})
	_, err := runRestore(restoreJob{Root: root, Target: want, Content: content}, nil)
	if !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("restore into a full tmpfs: %v, want an error wrapping ErrLimit", err)
	}
	if !strings.Contains(err.Error(), "disk_bytes") {
		t.Errorf("error %q does not say what to do", err)
	}
	if got := scanDir(t, root); !same(got, before) {
		t.Fatalf("the tree changed: %v, want %v", got, before)
	}
}

// testcapRoot skips unless the test runs as root (it mounts).
func testcapRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
}

// TestRestoreHelper is the restore run by TestRestoreKilledMidway's child.
func TestRestoreHelper(t *testing.T) {
	job := os.Getenv("AIRLOCK_TEST_RESTORE_JOB")
	if job == "" {
		t.Skip("run by TestRestoreKilledMidway")
	}
	b, err := os.ReadFile(job)
	if err != nil {
		t.Fatal(err)
	}
	var j restoreJob
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	_, err = runRestore(j, func() { fmt.Println("staged") })
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
}

// TestRestoreKilledMidway kills (SIGKILL) a process restoring a tree at
// moments during the commit, then starts over as a new agent does: the
// tree is the old one or the snapshot, never a mix.
func TestRestoreKilledMidway(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	beforeTree := randomTree(r, 1500)
	afterTree := randomTree(r, 1500)
	want, content := target(t, afterTree)
	var sawBefore, sawAfter int
	for i := range 8 {
		root := newRoot(t, beforeTree)
		before := scanDir(t, root)
		b, _ := json.Marshal(restoreJob{Root: root, Target: want, Content: content})
		job := filepath.Join(t.TempDir(), "job.json")
		if err := os.WriteFile(job, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "AIRLOCK_TEST_RESTORE_JOB="+job)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != "staged" {
		}
		// Kill at a moment spread over the commit (it takes some ms).
		time.Sleep(time.Duration(i) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
		}
		_ = cmd.Wait()

		fd, err := unix.Open(filepath.Join(root, "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = recoverTrees(map[string]int{sandbox.Workspace: fd})
		unix.Close(fd)
		if err != nil {
			t.Fatalf("recover: %v", err)
		}
		got := scanDir(t, root)
		switch {
		case same(got, before):
			sawBefore++
		case same(got, want):
			sawAfter++
		default:
			t.Fatalf("kill %d: the tree is neither the old one nor the snapshot (%d entries; old %d, snapshot %d)", i, len(got), len(before), len(want))
		}
	}
	t.Logf("after a kill: %d times the old tree, %d times the snapshot", sawBefore, sawAfter)
	if sawAfter == 0 {
		t.Errorf("no kill came after the commit point: the test did not reach the replay")
	}
}

func TestScanRefusesWhatItCannotKeep(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, ws string)
		class error
		says  string
	}{
		{"fifo", func(t *testing.T, ws string) {
			if err := unix.Mkfifo(filepath.Join(ws, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, sandbox.ErrInvalid, "FIFO"},
		{"socket", func(t *testing.T, ws string) {
			fd, _ := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			defer unix.Close(fd)
			if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(ws, "sock")}); err != nil {
				t.Fatal(err)
			}
		}, sandbox.ErrInvalid, "socket"},
		{"deep", func(t *testing.T, ws string) {
			p := ws
			for range sandbox.MaxTreeDepth + 5 {
				p = filepath.Join(p, "d")
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}, sandbox.ErrLimit, "deep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			ws := filepath.Join(root, "workspace")
			if err := os.Mkdir(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, ws)
			fd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			w := (&server{snap: newSnapState()}).newWalker(0, 0)
			err = w.walkRoot(fd, sandbox.Workspace)
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("scan: %v, want %v saying %q", err, tt.class, tt.says)
			}
		})
	}
	t.Run("symlink loop is kept as links", func(t *testing.T) {
		root := newRoot(t, map[string]node{"a": {kind: "link", data: "b"}, "b": {kind: "link", data: "a"}, "self": {kind: "link", data: "."}})
		got := scanDir(t, root)
		if len(got) != 4 || got[1].Type != sandbox.EntrySymlink || got[1].Target != "b" {
			t.Fatalf("entries %v", got)
		}
	})
	t.Run("quota of files", func(t *testing.T) {
		root := newRoot(t, map[string]node{"a": {kind: "file"}, "b": {kind: "file"}, "c": {kind: "file"}})
		fd, _ := unix.Open(filepath.Join(root, "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		defer unix.Close(fd)
		w := (&server{snap: newSnapState()}).newWalker(2, 0)
		if err := w.walkRoot(fd, sandbox.Workspace); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "quota") {
			t.Fatalf("scan past the quota: %v", err)
		}
	})
}

func TestDigestCacheSeesChanges(t *testing.T) {
	root := newRoot(t, map[string]node{"f": {kind: "file", data: "one"}})
	s := &server{snap: newSnapState()}
	fd, _ := unix.Open(filepath.Join(root, "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer unix.Close(fd)
	scan := func() string {
		w := s.newWalker(0, 0)
		if err := w.walkRoot(fd, sandbox.Workspace); err != nil {
			t.Fatal(err)
		}
		w.prune()
		return w.entries[1].Digest
	}
	if d := scan(); d != digestOf([]byte("one")) {
		t.Fatalf("digest %s", d)
	}
	// Same size, rewritten at once: the ctime changes, or the racy window
	// kept it out of the cache.
	if err := os.WriteFile(filepath.Join(root, "workspace", "f"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d := scan(); d != digestOf([]byte("two")) {
		t.Fatalf("digest after a change %s", d)
	}
}
