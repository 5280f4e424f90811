//go:build linux

package fsroot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// skipOrFail skips the test, or fails it when AIRLOCK_TEST_REQUIRE names
// capability, so that CI cannot pass by skipping.
func skipOrFail(t *testing.T, capability, format string, args ...any) {
	t.Helper()
	for c := range strings.SplitSeq(os.Getenv("AIRLOCK_TEST_REQUIRE"), ",") {
		if strings.TrimSpace(c) == capability {
			t.Fatalf("AIRLOCK_TEST_REQUIRE names %q, but: "+format, append([]any{capability}, args...)...)
		}
	}
	t.Skipf("needs %s: "+format, append([]any{capability}, args...)...)
}

// requireRoot checks that the test runs as root and that a thread can
// really take another file-system identity and come back.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "root", "running as euid %d", os.Geteuid())
	}
	// Probe with the raw calls, not asIdentity, which is under test.
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		unix.SetfsgidRetGid(1000)
		unix.SetfsuidRetUid(1000)
		if u, g := currentFsuid(), currentFsgid(); u != 1000 || g != 1000 {
			done <- fmt.Errorf("fsuid/fsgid stayed %d/%d", u, g)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		skipOrFail(t, "root", "cannot switch to fsuid 1000: %v", err)
	}
}

// fixture is a root directory with a /workspace, next to a directory
// "outside" (outside the root) holding a canary file no operation may reach.
type fixture struct {
	r       *Root
	base    string // host directory holding root and outside
	root    string // host path of the root
	ws      string // host path of /workspace
	outside string // host path of the outside directory
}

const canary = "CANARY"

func newFixture(t *testing.T, uid, gid int, workdir string) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	f.ws = filepath.Join(f.root, "workspace")
	for _, d := range []string{f.ws, f.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(f.outside, "canary.txt"), canary)
	r, err := Open(f.root, uid, gid, workdir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	f.r = r
	return f
}

// checkCanary fails the test unless the canary outside the root is intact
// and alone.
func (f fixture) checkCanary(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(f.outside, "canary.txt"))
	if err != nil || string(got) != canary {
		t.Fatalf("the canary outside the root changed: %q, %v", got, err)
	}
	entries, err := os.ReadDir(f.outside)
	if err != nil || len(entries) != 1 {
		t.Fatalf("the directory outside the root changed: %v, %v", entries, err)
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func readString(r *Root, p string) (string, error) {
	var b bytes.Buffer
	_, err := r.ReadFile(p, 0, 0, &b)
	return b.String(), err
}

func writeString(r *Root, p, data string) error {
	_, err := r.WriteFile(p, strings.NewReader(data), 0o644, 0)
	return err
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	r := f.r

	if err := r.Mkdir("dir/sub", 0o750); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	if err := r.Mkdir("/workspace/dir/sub", 0o750); err != nil {
		t.Fatalf("Mkdir of an existing directory: %v", err)
	}
	if st, err := os.Stat(filepath.Join(f.ws, "dir", "sub")); err != nil || !st.IsDir() {
		t.Fatalf("Mkdir made no directory: %v", err)
	}

	n, err := r.WriteFile("dir/sub/f.txt", strings.NewReader("hello"), 0o640, 0)
	if err != nil || n != 5 {
		t.Fatalf("WriteFile = %d, %v; want 5, nil", n, err)
	}
	if st, err := os.Stat(filepath.Join(f.ws, "dir/sub/f.txt")); err != nil || st.Mode() != 0o640 {
		t.Fatalf("written file: %v, %v; want mode 0640 whatever the umask", st, err)
	}
	if got, err := readString(r, "/workspace/dir/sub/f.txt"); err != nil || got != "hello" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if err := writeString(r, "dir/sub/f.txt", "bye"); err != nil {
		t.Fatalf("WriteFile over a file: %v", err)
	}
	if got, err := readString(r, "dir/sub/f.txt"); err != nil || got != "bye" {
		t.Fatalf("ReadFile after replace = %q, %v", got, err)
	}

	info, err := r.Stat("dir/sub/f.txt")
	want := sandbox.FileInfo{Name: "f.txt", Path: "/workspace/dir/sub/f.txt", Size: 3, Mode: 0o644, Type: "file"}
	info.ModTime = time.Time{}
	if err != nil || info != want {
		t.Fatalf("Stat = %+v, %v; want %+v", info, err, want)
	}

	symlink(t, "sub/f.txt", filepath.Join(f.ws, "dir", "link"))
	if got, err := readString(r, "dir/link"); err != nil || got != "bye" {
		t.Fatalf("ReadFile through a symlink = %q, %v", got, err)
	}
	entries, err := r.ReadDir("dir")
	if err != nil {
		t.Fatalf("ReadDir: %v", err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+"|"+e.Path+"|"+e.Type+"|"+e.Target)
	}
	wantEntries := []string{"link|/workspace/dir/link|symlink|sub/f.txt", "sub|/workspace/dir/sub|dir|"}
	if strings.Join(got, " ") != strings.Join(wantEntries, " ") {
		t.Fatalf("ReadDir = %q; want %q", got, wantEntries)
	}
	if entries[1].Mode != fs.ModeDir|0o750 || entries[0].Mode&fs.ModeSymlink == 0 {
		t.Fatalf("ReadDir modes = %v, %v", entries[0].Mode, entries[1].Mode)
	}
	if info, err := r.Stat("dir/link"); err != nil || info.Type != "symlink" || info.Target != "sub/f.txt" {
		t.Fatalf("Stat of a symlink = %+v, %v", info, err)
	}
	if info, err := r.Stat("/"); err != nil || info.Type != "dir" || info.Path != "/" {
		t.Fatalf("Stat(/) = %+v, %v", info, err)
	}

	if err := r.Rename("dir/sub/f.txt", "/workspace/g.txt"); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.ws, "g.txt")); err != nil || string(b) != "bye" {
		t.Fatalf("renamed file = %q, %v", b, err)
	}
	if err := r.Remove("dir"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := r.Stat("dir"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Stat after Remove: %v; want ErrNotFound", err)
	}
	if err := r.Remove("g.txt"); err != nil {
		t.Fatalf("Remove of a file: %v", err)
	}
	if entries, err := r.ReadDir("."); err != nil || len(entries) != 0 {
		t.Fatalf("ReadDir of the emptied workspace = %v, %v", entries, err)
	}
	f.checkCanary(t)
}

func TestReadFileOffsetLimit(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	write(t, filepath.Join(f.ws, "digits"), "0123456789")
	tests := []struct {
		name          string
		offset, limit int64
		want          string
		wantErr       error
	}{
		{name: "all", want: "0123456789"},
		{name: "from offset", offset: 3, want: "3456789"},
		{name: "offset and limit", offset: 3, limit: 4, want: "3456"},
		{name: "limit past the end", offset: 9, limit: 5, want: "9"},
		{name: "limit exactly the size", limit: 10, want: "0123456789"},
		{name: "offset at the end", offset: 10, want: ""},
		{name: "offset past the end", offset: 20, limit: 3, want: ""},
		{name: "largest offset", offset: math.MaxInt64, want: ""},
		{name: "negative offset", offset: -1, wantErr: sandbox.ErrInvalid},
		{name: "negative limit", limit: -1, wantErr: sandbox.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			n, err := f.r.ReadFile("digits", tt.offset, tt.limit, &b)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadFile: %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || b.String() != tt.want || n != int64(len(tt.want)) {
				t.Fatalf("ReadFile = %d, %q, %v; want %q", n, b.String(), err, tt.want)
			}
		})
	}
}

func TestLexicalEscapes(t *testing.T) {
	f := newFixture(t, -1, -1, "/")
	ops := map[string]func(p string) error{
		"ReadFile":  func(p string) error { _, err := readString(f.r, p); return err },
		"WriteFile": func(p string) error { return writeString(f.r, p, "x") },
		"ReadDir":   func(p string) error { _, err := f.r.ReadDir(p); return err },
		"Stat":      func(p string) error { _, err := f.r.Stat(p); return err },
		"Mkdir":     func(p string) error { return f.r.Mkdir(p, 0o755) },
		"Remove":    f.r.Remove,
		"RenameOld": func(p string) error { return f.r.Rename(p, "/workspace/x") },
		"RenameNew": func(p string) error { return f.r.Rename("/workspace", p) },
	}
	paths := []string{"../outside/canary.txt", "/../../outside/canary.txt", "workspace/../../outside", "/..", "..", "a/../../b"}
	for op, do := range ops {
		for _, p := range paths {
			t.Run(op+"/"+p, func(t *testing.T) {
				err := do(p)
				if !errors.Is(err, sandbox.ErrOutside) || !strings.Contains(err.Error(), "climbs above") {
					t.Fatalf("%s(%q): %v; want ErrOutside", op, p, err)
				}
			})
		}
	}
	f.checkCanary(t)
	if _, err := os.Stat(filepath.Join(f.ws)); err != nil {
		t.Fatalf("the workspace was moved: %v", err)
	}
}

func TestSymlinkEscapes(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	hostCanary := filepath.Join(f.outside, "canary.txt")
	links := map[string]string{
		"rel":     "../../outside/canary.txt",
		"deep":    strings.Repeat("../", 20) + "outside/canary.txt",
		"abs":     hostCanary,
		"absdir":  f.outside,
		"reldir":  "../../outside",
		"chain":   "rel",
		"rootdir": "/",
	}
	for name, target := range links {
		symlink(t, target, filepath.Join(f.ws, name))
	}
	paths := []string{"rel", "deep", "abs", "absdir/canary.txt", "reldir/canary.txt", "chain", "rootdir/outside/canary.txt", "rootdir" + f.outside + "/canary.txt"}

	// Nothing inside the root is where the links point: every read fails.
	for _, p := range paths {
		t.Run("missing/"+p, func(t *testing.T) {
			got, err := readString(f.r, p)
			if !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("ReadFile(%q) = %q, %v; want ErrNotFound", p, got, err)
			}
		})
	}

	// Decoys where the links land inside the root: every read finds them.
	for _, d := range []string{filepath.Join(f.root, "outside"), filepath.Join(f.root, f.outside)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(d, "canary.txt"), "DECOY")
	}
	for _, p := range paths {
		t.Run("decoy/"+p, func(t *testing.T) {
			got, err := readString(f.r, p)
			if err != nil || got != "DECOY" {
				t.Fatalf("ReadFile(%q) = %q, %v; want the decoy inside the root", p, got, err)
			}
		})
	}

	// Every other operation through a symlinked middle component stays inside too.
	for _, dir := range []string{"absdir", "reldir"} {
		t.Run("ops/"+dir, func(t *testing.T) {
			if info, err := f.r.Stat(dir + "/canary.txt"); err != nil || info.Size != int64(len("DECOY")) {
				t.Fatalf("Stat = %+v, %v; want the decoy", info, err)
			}
			if entries, err := f.r.ReadDir(dir); err != nil || len(entries) != 1 {
				t.Fatalf("ReadDir = %v, %v", entries, err)
			}
			if err := writeString(f.r, dir+"/new.txt", "x"); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			if err := f.r.Mkdir(dir+"/newdir/sub", 0o755); err != nil {
				t.Fatalf("Mkdir: %v", err)
			}
			if err := f.r.Rename(dir+"/new.txt", dir+"/newdir/moved.txt"); err != nil {
				t.Fatalf("Rename: %v", err)
			}
			if err := f.r.Remove(dir + "/newdir"); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			f.checkCanary(t)
		})
	}
	if err := f.r.Remove("abs"); err != nil {
		t.Fatalf("Remove of a symlink: %v", err)
	}
	if err := f.r.Remove("absdir/canary.txt"); err != nil {
		t.Fatalf("Remove through a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, f.outside, "canary.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the decoy inside the root was not the one removed: %v", err)
	}
	f.checkCanary(t)
}

// TestSymlinkSwapRace swaps a directory for a symlink to the outside while
// reading through it: the read sees the directory or nothing, never the
// canary.
func TestSymlinkSwapRace(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	if err := os.Mkdir(filepath.Join(f.ws, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.ws, "real", "canary.txt"), "INSIDE")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		d := filepath.Join(f.ws, "d")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(f.ws, "tmp")
			os.Remove(tmp)
			if i%2 == 0 {
				os.Symlink(f.outside, tmp)
			} else {
				os.Symlink("real", tmp)
			}
			os.Rename(tmp, d)
		}
	})
	deadline := time.Now().Add(time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		got, err := readString(f.r, "d/canary.txt")
		if got == canary {
			t.Fatalf("read the canary outside the root")
		}
		if err == nil && got != "INSIDE" || err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("ReadFile = %q, %v", got, err)
		}
		reads++
	}
	close(stop)
	wg.Wait()
	f.checkCanary(t)
	t.Logf("%d reads", reads)
}

func TestWriteFileFinalSymlink(t *testing.T) {
	tests := []struct {
		name   string
		target func(f fixture) string
	}{
		{name: "absolute host path", target: func(f fixture) string { return filepath.Join(f.outside, "canary.txt") }},
		{name: "relative climbing out", target: func(f fixture) string { return "../../outside/canary.txt" }},
		{name: "file inside the root", target: func(f fixture) string { return "/workspace/inside.txt" }},
		{name: "dangling", target: func(f fixture) string { return "/workspace/nothing" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, -1, -1, "/workspace")
			write(t, filepath.Join(f.ws, "inside.txt"), "ORIGINAL")
			symlink(t, tt.target(f), filepath.Join(f.ws, "link"))
			if err := writeString(f.r, "link", "NEW"); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			st, err := os.Lstat(filepath.Join(f.ws, "link"))
			if err != nil || !st.Mode().IsRegular() {
				t.Fatalf("the symlink was not replaced by a regular file: %v, %v", st, err)
			}
			if got, err := readString(f.r, "link"); err != nil || got != "NEW" {
				t.Fatalf("ReadFile = %q, %v", got, err)
			}
			if b, _ := os.ReadFile(filepath.Join(f.ws, "inside.txt")); string(b) != "ORIGINAL" {
				t.Fatalf("wrote through the symlink: inside.txt = %q", b)
			}
			if _, err := os.Lstat(filepath.Join(f.ws, "nothing")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("wrote through a dangling symlink: %v", err)
			}
			f.checkCanary(t)
		})
	}
}

func TestSymlinkLoop(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	symlink(t, "loop2", filepath.Join(f.ws, "loop1"))
	symlink(t, "loop1", filepath.Join(f.ws, "loop2"))
	symlink(t, "/workspace/self", filepath.Join(f.ws, "self"))
	tests := []struct {
		name string
		op   func() error
	}{
		{name: "ReadFile", op: func() error { _, err := readString(f.r, "loop1"); return err }},
		{name: "ReadFile self", op: func() error { _, err := readString(f.r, "self"); return err }},
		{name: "ReadDir", op: func() error { _, err := f.r.ReadDir("loop1"); return err }},
		{name: "Stat below", op: func() error { _, err := f.r.Stat("loop1/x"); return err }},
		{name: "WriteFile below", op: func() error { return writeString(f.r, "loop1/x", "x") }},
		{name: "Mkdir below", op: func() error { return f.r.Mkdir("self/x", 0o755) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, sandbox.ErrInvalid) || !errors.Is(err, unix.ELOOP) || !strings.Contains(err.Error(), "symlink loop") {
				t.Fatalf("%v; want ErrInvalid saying symlink loop", err)
			}
		})
	}
	if info, err := f.r.Stat("loop1"); err != nil || info.Type != "symlink" || info.Target != "loop2" {
		t.Fatalf("Stat of a looping symlink = %+v, %v", info, err)
	}
	if err := f.r.Remove("loop1"); err != nil {
		t.Fatalf("Remove of a looping symlink: %v", err)
	}
}

// TestKernelFileSystems opens a root on the host's "/" to reach a real
// /proc and /sys: the file API refuses them and magic links.
func TestKernelFileSystems(t *testing.T) {
	r, err := Open("/", -1, -1, "/")
	if err != nil {
		t.Fatalf("Open(/): %v", err)
	}
	defer r.Close()
	var s unix.Statfs_t
	if err := unix.Statfs("/proc", &s); err != nil || s.Type != unix.PROC_SUPER_MAGIC {
		t.Fatalf("this host has no procfs on /proc (%v); the test cannot run", err)
	}
	tests := []struct {
		name    string
		op      func() error
		wantMsg string
	}{
		{name: "read /proc file", op: func() error { _, err := readString(r, "/proc/self/status"); return err }, wantMsg: "/proc"},
		{name: "read /sys file", op: func() error { _, err := readString(r, "/sys/kernel/uevent_seqnum"); return err }, wantMsg: "/sys"},
		{name: "list /proc", op: func() error { _, err := r.ReadDir("/proc"); return err }, wantMsg: "/proc"},
		{name: "stat in /proc", op: func() error { _, err := r.Stat("/proc/self/status"); return err }, wantMsg: "/proc"},
		{name: "write /proc file", op: func() error { return writeString(r, "/proc/self/comm", "x") }, wantMsg: "/proc"},
		{name: "magic link root", op: func() error { _, err := readString(r, "/proc/self/root/etc/hostname"); return err }, wantMsg: "magic link"},
		{name: "magic link fd", op: func() error { _, err := readString(r, "/proc/self/fd/0"); return err }, wantMsg: "magic link"},
		{name: "magic link cwd", op: func() error { _, err := r.ReadDir("/proc/self/cwd"); return err }, wantMsg: "magic link"},
		{name: "device /dev/null", op: func() error { _, err := readString(r, "/dev/null"); return err }, wantMsg: "character device"},
		{name: "write over /dev/null", op: func() error { return writeString(r, "/dev/null", "x") }, wantMsg: "character device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.op()
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("%v; want ErrInvalid mentioning %q", err, tt.wantMsg)
			}
		})
	}

	// Inside a root without /proc, a symlink to /proc/self/root is just a
	// path inside the root.
	f := newFixture(t, -1, -1, "/workspace")
	symlink(t, "/proc/self/root", filepath.Join(f.ws, "pl"))
	if got, err := readString(f.r, "pl/etc/passwd"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("ReadFile through a symlink to /proc/self/root = %q, %v; want ErrNotFound", got, err)
	}
}

func TestNonRegularFiles(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	if err := unix.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(f.ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Mkdir(filepath.Join(f.ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "fifo", filepath.Join(f.ws, "fifolink"))
	tests := []struct{ name, path, kind string }{
		{name: "FIFO", path: "fifo", kind: "FIFO"},
		{name: "symlink to a FIFO", path: "fifolink", kind: "FIFO"},
		{name: "socket", path: "sock", kind: "socket"},
		{name: "directory", path: "dir", kind: "directory"},
	}
	if os.Geteuid() == 0 {
		if err := unix.Mknod(filepath.Join(f.ws, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
			tests = append(tests, struct{ name, path, kind string }{name: "char device", path: "null", kind: "character device"})
		} else {
			t.Logf("mknod failed (%v): the device case runs through /dev/null in TestKernelFileSystems only", err)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := readString(f.r, tt.path); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.kind) {
					t.Fatalf("ReadFile: %v; want ErrInvalid naming %s", err, tt.kind)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("ReadFile(%q) hangs", tt.path)
			}
			if tt.path == "fifolink" {
				return // WriteFile replaces a symlink, whatever it points to
			}
			if err := writeString(f.r, tt.path, "x"); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.kind) {
				t.Fatalf("WriteFile: %v; want ErrInvalid naming %s", err, tt.kind)
			}
		})
	}
}

func TestRemoveTreeWithOutsideLinks(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	tree := filepath.Join(f.ws, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(tree, "a.txt"), "a")
	write(t, filepath.Join(tree, "sub", "deeper", "b.txt"), "b")
	symlink(t, f.outside, filepath.Join(tree, "out"))
	symlink(t, "../../../../outside", filepath.Join(tree, "sub", "relout"))
	symlink(t, filepath.Join(f.outside, "canary.txt"), filepath.Join(tree, "sub", "canarylink"))
	symlink(t, f.outside, filepath.Join(f.ws, "toplink"))

	if err := f.r.Remove("toplink"); err != nil {
		t.Fatalf("Remove of a symlink to a directory: %v", err)
	}
	if err := f.r.Remove("tree"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, p := range []string{tree, filepath.Join(f.ws, "toplink")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s is still there: %v", p, err)
		}
	}
	if err := f.r.Remove("tree"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Remove of a missing path: %v; want ErrNotFound", err)
	}
	f.checkCanary(t)
}

func TestRename(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	write(t, filepath.Join(f.ws, "x"), "x")
	if err := os.MkdirAll(filepath.Join(f.ws, "full", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(f.ws, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string
		wantErr  error
	}{
		{name: "old is dot-dot", old: "full/sub/..", new: "y", wantErr: sandbox.ErrInvalid},
		{name: "new is dot-dot", old: "x", new: "full/..", wantErr: sandbox.ErrInvalid},
		{name: "old is dot", old: ".", new: "y", wantErr: sandbox.ErrInvalid},
		{name: "old is the root", old: "/", new: "y", wantErr: sandbox.ErrInvalid},
		{name: "new is the root", old: "x", new: "/", wantErr: sandbox.ErrInvalid},
		{name: "old climbs out", old: "../../x", new: "y", wantErr: sandbox.ErrOutside},
		{name: "new climbs out", old: "x", new: "/../outside/x", wantErr: sandbox.ErrOutside},
		{name: "missing", old: "nothing", new: "y", wantErr: sandbox.ErrNotFound},
		{name: "onto a non-empty directory", old: "empty", new: "full", wantErr: sandbox.ErrExists},
		{name: "directory into itself", old: "full", new: "full/sub/full", wantErr: sandbox.ErrInvalid},
		{name: "onto an empty directory", old: "full", new: "empty"},
		{name: "file", old: "x", new: "/workspace/y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.r.Rename(tt.old, tt.new)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Rename(%q, %q): %v; want %v", tt.old, tt.new, err, tt.wantErr)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(f.ws, "y")); err != nil || string(b) != "x" {
		t.Fatalf("y = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "empty", "sub")); err != nil {
		t.Fatalf("directory rename: %v", err)
	}
	f.checkCanary(t)
}

func TestMkdir(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	write(t, filepath.Join(f.ws, "file"), "x")
	if err := os.Mkdir(filepath.Join(f.ws, "realdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "realdir", filepath.Join(f.ws, "dirlink"))
	symlink(t, "nothing", filepath.Join(f.ws, "dangling"))
	tests := []struct {
		name    string
		path    string
		wantErr error
	}{
		{name: "new nested", path: "a/b/c"},
		{name: "existing", path: "realdir"},
		{name: "symlink to a directory", path: "dirlink"},
		{name: "below a symlink to a directory", path: "dirlink/new"},
		{name: "root", path: "/"},
		{name: "a file", path: "file", wantErr: sandbox.ErrExists},
		{name: "below a file", path: "file/sub", wantErr: sandbox.ErrExists},
		{name: "a dangling symlink", path: "dangling", wantErr: sandbox.ErrExists},
		{name: "empty", path: "", wantErr: sandbox.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.r.Mkdir(tt.path, 0o700)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Mkdir(%q): %v; want %v", tt.path, err, tt.wantErr)
			}
		})
	}
	if st, err := os.Stat(filepath.Join(f.ws, "a", "b", "c")); err != nil || st.Mode() != fs.ModeDir|0o700 {
		t.Fatalf("a/b/c: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "realdir", "new")); err != nil {
		t.Fatalf("Mkdir below a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(f.ws, "nothing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Mkdir went through a dangling symlink: %v", err)
	}
}

// errReader fails after some data.
type errReader struct{ n int }

func (e *errReader) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, errors.New("the source broke")
	}
	n := min(e.n, len(p))
	e.n -= n
	return n, nil
}

func TestWriteFileFailures(t *testing.T) {
	tests := []struct {
		name     string
		src      io.Reader
		maxBytes int64
		wantErr  error
		wantN    int64
	}{
		{name: "exactly the limit", src: strings.NewReader("0123456789"), maxBytes: 10, wantN: 10},
		{name: "past the limit", src: strings.NewReader("0123456789A"), maxBytes: 10, wantErr: sandbox.ErrLimit},
		{name: "far past the limit", src: io.LimitReader(zeros{}, 1<<20), maxBytes: 1000, wantErr: sandbox.ErrLimit},
		{name: "source error", src: &errReader{n: 5000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, -1, -1, "/workspace")
			write(t, filepath.Join(f.ws, "target"), "OLD")
			n, err := f.r.WriteFile("target", tt.src, 0o644, tt.maxBytes)
			b, _ := os.ReadFile(filepath.Join(f.ws, "target"))
			switch {
			case tt.name == "source error":
				if err == nil || !strings.Contains(err.Error(), "the source broke") {
					t.Fatalf("WriteFile: %v; want the source's error", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("WriteFile: %v; want %v", err, tt.wantErr)
				}
			default:
				if err != nil || n != tt.wantN || int64(len(b)) != tt.wantN {
					t.Fatalf("WriteFile = %d, %v; file has %d bytes; want %d", n, err, len(b), tt.wantN)
				}
			}
			if err != nil && string(b) != "OLD" {
				t.Fatalf("a failed write changed the file: %q", b)
			}
			entries, _ := os.ReadDir(f.ws)
			if len(entries) != 1 {
				t.Fatalf("files left in the directory: %v", entries)
			}
		})
	}

	f := newFixture(t, -1, -1, "/workspace")
	if err := writeString(f.r, "nodir/x", "x"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("WriteFile into a missing directory: %v; want ErrNotFound", err)
	}
	for _, p := range []string{"/", ".", "x/..", ""} {
		if err := writeString(f.r, p, "x"); !errors.Is(err, sandbox.ErrInvalid) {
			t.Fatalf("WriteFile(%q): %v; want ErrInvalid", p, err)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestErrorsNameInRootPaths(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	symlink(t, f.outside, filepath.Join(f.ws, "out"))
	errs := []error{
		func() error { _, err := readString(f.r, "missing"); return err }(),
		func() error { _, err := f.r.ReadDir("out/missing"); return err }(),
		func() error { _, err := f.r.Stat("out/a/b"); return err }(),
		f.r.Remove("missing"),
		f.r.Rename("missing", "other"),
		writeString(f.r, "out/missing/x", "x"),
		writeString(f.r, ".", "x"),
	}
	for _, err := range errs {
		if err == nil {
			t.Fatal("an operation that must fail succeeded")
		}
		if strings.Contains(err.Error(), f.base) {
			t.Errorf("error names a host path: %v", err)
		}
		if !strings.Contains(err.Error(), "/workspace/") && !strings.Contains(err.Error(), `"."`) {
			t.Errorf("error does not name the in-root path: %v", err)
		}
	}
}

func TestClose(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	if err := f.r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.r.Stat("."); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Stat after Close: %v; want ErrClosed", err)
	}
}

func TestOpenValidates(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		dir      string
		uid, gid int
		workdir  string
	}{
		{name: "relative workdir", dir: dir, uid: -1, gid: -1, workdir: "workspace"},
		{name: "escaping workdir", dir: dir, uid: -1, gid: -1, workdir: "/../x"},
		{name: "bad uid", dir: dir, uid: -2, gid: -1, workdir: "/"},
		{name: "bad gid", dir: dir, uid: -1, gid: 1 << 32, workdir: "/"},
		{name: "missing dir", dir: filepath.Join(dir, "nothing"), uid: -1, gid: -1, workdir: "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := Open(tt.dir, tt.uid, tt.gid, tt.workdir); err == nil {
				r.Close()
				t.Fatal("Open succeeded")
			}
		})
	}
}

// TestWriteFileDiskFull fills a small tmpfs: the error says "disk full",
// wraps sandbox.ErrLimit, and no temporary file is left.
func TestWriteFileDiskFull(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		skipOrFail(t, "root", "mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	r, err := Open(dir, -1, -1, "/")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.WriteFile("big", io.LimitReader(zeros{}, 1<<20), 0o644, 0)
	if !errors.Is(err, sandbox.ErrLimit) || !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("WriteFile: %v; want disk full (ErrLimit)", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("files left behind: %v, %v", entries, err)
	}
}

// TestResolveAndNoFollow: Resolve names the real in-root path behind
// symlinked directories (keeping the last element and missing directories
// as written), and a NoFollow root writes only along paths without a
// symlink, so a checked path is the written one.
func TestResolveAndNoFollow(t *testing.T) {
	f := newFixture(t, -1, -1, "/workspace")
	if err := os.MkdirAll(filepath.Join(f.root, "tmp", "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, "/tmp", filepath.Join(f.ws, "s"))
	symlink(t, "../tmp/real", filepath.Join(f.ws, "r"))
	symlink(t, f.outside, filepath.Join(f.ws, "out"))
	symlink(t, "/etc/passwd", filepath.Join(f.ws, "last"))
	for in, want := range map[string]string{
		"s/x":             "/tmp/x",
		"/workspace/s/x":  "/tmp/x",
		"r/y":             "/tmp/real/y",
		"s/real/new/deep": "/tmp/real/new/deep",
		"s/missing/a/b":   "/tmp/missing/a/b",
		"last":            "/workspace/last",
		"plain.txt":       "/workspace/plain.txt",
		"/":               "/",
		// A symlink whose target does not exist inside the root (here a
		// host path): kept as written, and a NoFollow write there fails.
		"out/canary.txt": "/workspace/out/canary.txt",
		// Paths are cleaned as written before anything is resolved.
		"s/../workspace/z": "/workspace/workspace/z",
	} {
		got, err := f.r.Resolve(in)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	strict := f.r.NoFollow()
	if err := writeString(strict, "s/x", "through a symlink"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("NoFollow write through a symlinked directory = %v; want a refusal (ErrInvalid)", err)
	}
	if _, err := os.Stat(filepath.Join(f.root, "tmp", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused write left /tmp/x: %v", err)
	}
	for _, op := range []func() error{
		func() error { return strict.Mkdir("s/d", 0o755) },
		func() error { return strict.Symlink("t", "s/l") },
		func() error { return strict.Remove("r/gone") },
		func() error { return strict.Rename("plain.txt", "s/moved") },
	} {
		if err := op(); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("NoFollow op through a symlinked directory = %v; want ErrInvalid", err)
		}
	}
	real, err := f.r.Resolve("s/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeString(strict, real, "resolved"); err != nil {
		t.Fatalf("NoFollow write of the resolved path %s: %v", real, err)
	}
	if got, err := os.ReadFile(filepath.Join(f.root, "tmp", "x")); err != nil || string(got) != "resolved" {
		t.Errorf("/tmp/x = %q, %v", got, err)
	}
	// Reads still follow symlinks inside the root.
	if got, err := readString(strict, "s/x"); err != nil || got != "resolved" {
		t.Errorf("NoFollow read through a symlink = %q, %v", got, err)
	}
	f.checkCanary(t)
}
