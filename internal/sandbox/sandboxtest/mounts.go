package sandboxtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// mountCases check Spec.Mounts and Spec.Root: host paths shown inside,
// read-only unless asked, never through a symlink.
func mountCases() []testCase {
	hostMounts := []need{needShell, needHostMounts}
	var rootBefore string // the prepared root's tree before the sandbox was made
	return []testCase{
		{name: "read_only", spec: readOnlyMounts, needs: hostMounts, run: testReadOnlyMounts},
		{name: "writable", spec: writableMount, needs: hostMounts, run: testWritableMount},
		{name: "symlink_refused", own: true, needs: []need{needHostMounts}, run: testMountSymlinkRefused},
		{name: "swap_race", own: true, needs: hostMounts, run: testMountSwapRace},
		// The root cases check the host directory shown as it is, which
		// a driver that makes it into an image (microvm) does not.
		{name: "root", needs: []need{needShell, needHostRoot, needHostMounts},
			spec: func(t *testing.T, s *sandbox.Spec) { preparedRoot(t, s); rootBefore = ListTree(t, s.Root) },
			run:  func(t *testing.T, e *env) { testPreparedRoot(t, e, rootBefore) }},
		{name: "root_symlink_refused", own: true, needs: []need{needHostRoot, needHostMounts}, run: testRootSymlinkRefused},
	}
}

// hostDir makes a host directory holding name with content, readable by
// everyone (a sandbox's uids are "others" on the host).
func hostDir(t *testing.T, name, content string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readOnlyMounts(t *testing.T, s *sandbox.Spec) {
	dir := hostDir(t, "data.txt", "host data\n")
	file := filepath.Join(hostDir(t, "single.txt", "single file\n"), "single.txt")
	s.Mounts = []sandbox.Mount{{Source: dir, Target: "/mnt/data"}, {Source: file, Target: "/workspace/single.txt"}}
}

func testReadOnlyMounts(t *testing.T, e *env) {
	dir := e.spec.Mounts[0].Source
	if o := e.run(t, execArgv("cat", "/mnt/data/data.txt", "/workspace/single.txt")); o.res.ExitCode != 0 || o.stdout != "host data\nsingle file\n" {
		t.Errorf("reading the mounts: %s", o)
	}
	for _, script := range []string{"touch /mnt/data/new", "echo x > /mnt/data/data.txt", "rm /mnt/data/data.txt", "echo x > /workspace/single.txt"} {
		if o := e.sh(t, script); o.res.ExitCode == 0 {
			t.Errorf("%s succeeded on a read-only mount", script)
		}
	}
	if err := e.sb.Files().WriteFile(e.ctx, "/mnt/data/api.txt", strings.NewReader("x"), 0o644); err == nil {
		t.Errorf("WriteFile on a read-only mount succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "data.txt")); string(b) != "host data\n" {
		t.Errorf("the host file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Errorf("a file appeared in the read-only host directory")
	}
	mounts := e.mountTable(t)
	for _, target := range []string{"/mnt/data", "/workspace/single.txt"} {
		i := slices.IndexFunc(mounts, func(m mountinfo.Mount) bool { return m.Point == target })
		if i < 0 {
			t.Errorf("no mount at %s inside", target)
			continue
		}
		// Not nodev: gVisor's table does not show it (the native driver's own
		// test checks it).
		for _, opt := range []string{"ro", "nosuid"} {
			if !slices.Contains(mounts[i].Options, opt) {
				t.Errorf("mount %s lacks %s: %+v", target, opt, mounts[i])
			}
		}
	}
}

// mountTable reads the sandbox's own mount table.
func (e *env) mountTable(t *testing.T) []mountinfo.Mount {
	t.Helper()
	mounts, err := mountinfo.Parse(strings.NewReader(e.shOK(t, "cat /proc/self/mountinfo")))
	if err != nil {
		t.Fatalf("the sandbox's /proc/self/mountinfo: %v", err)
	}
	return mounts
}

func writableMount(t *testing.T, s *sandbox.Spec) {
	dir := hostDir(t, "data.txt", "host data\n")
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s.Mounts = []sandbox.Mount{{Source: dir, Target: "/mnt/rw", Writable: true}}
}

func testWritableMount(t *testing.T, e *env) {
	if o := e.sh(t, "echo from-sandbox > /mnt/rw/new.txt"); o.res.ExitCode != 0 {
		t.Fatalf("writing to a writable mount: %s", o)
	}
	if b, err := os.ReadFile(filepath.Join(e.spec.Mounts[0].Source, "new.txt")); err != nil || string(b) != "from-sandbox\n" {
		t.Errorf("the host sees %q, %v", b, err)
	}
}

// createFails makes a sandbox from spec and returns the error, which must
// not be nil: a sandbox that was made is closed and reported.
func (e *env) createFails(t *testing.T, what string, spec sandbox.Spec) error {
	t.Helper()
	sb, err := e.driver.Create(e.ctx, spec)
	if err == nil {
		e.close(t, sb)
		t.Errorf("%s was accepted", what)
	}
	return err
}

func testMountSymlinkRefused(t *testing.T, e *env) {
	real := hostDir(t, "data.txt", "behind a link\n")
	base := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	parentLink := filepath.Join(base, "parent-link")
	if err := os.Symlink(filepath.Dir(real), parentLink); err != nil {
		t.Fatal(err)
	}
	fileLink := filepath.Join(base, "file-link")
	if err := os.Symlink(filepath.Join(real, "data.txt"), fileLink); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{link, filepath.Join(parentLink, filepath.Base(real)), fileLink} {
		what := "a mount whose source " + src + " holds a symlink"
		if err := e.createFails(t, what, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: src, Target: "/mnt/x"}}}); err != nil && !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	err := e.createFails(t, "a missing mount source", sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: filepath.Join(base, "missing"), Target: "/mnt/x"}}})
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a missing mount source: %v, want ErrNotFound", err)
	}
}

// swapRaceMin and swapRaceMax bound how many sandboxes testMountSwapRace
// makes; between them it goes on for swapRaceFor, so that a driver that
// makes sandboxes fast is raced as often as its speed allows.
const (
	swapRaceMin = 20
	swapRaceMax = 60
	swapRaceFor = 8 * time.Second
)

// testMountSwapRace swaps a mount's source directory with a symlink to a
// directory holding a canary, atomically and in a tight loop, while
// sandboxes are made from it. No sandbox may ever see the canary: each
// either mounts the original directory or fails.
func testMountSwapRace(t *testing.T, e *env) {
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	src, evil, link := filepath.Join(base, "src"), filepath.Join(base, "evil"), filepath.Join(base, "link")
	for dir, content := range map[string]string{src: "original\n", evil: "CANARY\n"} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "marker"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(evil, link); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if err := exchange(src, link); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
			swaps.Add(1)
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()

	var made, mounted, refused int
	errs := map[string]int{}
	start := time.Now()
	for ; made < swapRaceMin || (made < swapRaceMax && time.Since(start) < swapRaceFor); made++ {
		sb, err := e.driver.Create(e.ctx, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: src, Target: "/mnt/m"}}})
		if err != nil {
			refused++
			errs[err.Error()]++
			continue
		}
		mounted++
		var out strings.Builder
		res, err := sandbox.Run(e.ctx, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /mnt/m/marker; ls /mnt/m"}, Stdout: &out})
		var api strings.Builder
		apiErr := sb.Files().ReadFile(e.ctx, "/mnt/m/marker", 0, 0, &api)
		e.close(t, sb)
		if err != nil || res.ExitCode != 0 {
			t.Errorf("read the mount: %v %s", err, describe(res))
			continue
		}
		if out.String() != "original\nmarker\n" || apiErr != nil || api.String() != "original\n" {
			t.Fatalf("a sandbox made while the source was swapped for a symlink sees %q (file API: %q, %v); want only the original directory", out.String(), api.String(), apiErr)
		}
	}
	t.Logf("%d sandboxes mounted the original directory, %d were refused, %d swaps; errors: %v", mounted, refused, swaps.Load(), errs)
	if swaps.Load() < int64(made) {
		t.Errorf("the swapper made only %d swaps for %d sandboxes: the race was not exercised", swaps.Load(), made)
	}
}

// preparedRoot makes a host directory holding the mount points a root
// needs, /bin/sh with its libraries, and /etc/marker, and makes it the
// sandbox's root.
func preparedRoot(t *testing.T, s *sandbox.Spec) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"proc", "dev", "tmp", "workspace", "bin", "etc"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	CopyProgram(t, "/bin/sh", root, "/bin/sh")
	marker := fmt.Sprintf("root-marker-%d", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(root, "etc", "marker"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Root = root
}

// testPreparedRoot: a command runs in the prepared root, which it cannot
// change; before is the root's tree before the sandbox was made, which
// neither making the sandbox nor running in it changes.
func testPreparedRoot(t *testing.T, e *env, before string) {
	root := e.spec.Root
	marker, err := os.ReadFile(filepath.Join(root, "etc", "marker"))
	if err != nil {
		t.Fatal(err)
	}
	// Built-ins only: the prepared root holds nothing but sh.
	script := `read m < /etc/marker; echo "$m"
[ -e /usr/bin/python3 ] && echo host-usr
[ -e /etc/passwd ] && echo composed-etc
echo data > /workspace/f && read w < /workspace/f && echo "$w"
(echo x > /newfile) 2>/dev/null && echo wrote-root
(echo x > /etc/newfile) 2>/dev/null && echo wrote-etc
echo end`
	o := e.run(t, execArgv("/bin/sh", "-c", script))
	if want := string(marker) + "data\nend\n"; o.stdout != want || o.res.ExitCode != 0 {
		t.Errorf("in the prepared root: %s; want stdout %q", o, want)
	}
	for _, p := range []string{"newfile", "etc/newfile", "workspace/f"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("the sandbox wrote %s into the host's root directory", p)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) > 0 {
		t.Errorf("mount points were made in the host's root directory: /tmp holds %v", entries)
	}
	if after := ListTree(t, root); after != before {
		t.Errorf("the host's root directory changed:\nbefore %s\nafter  %s", before, after)
	}
}

func testRootSymlinkRefused(t *testing.T, e *env) {
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "root-link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if err := e.createFails(t, "a root that is a symlink", sandbox.Spec{Root: link, Limits: smallLimits}); err != nil && !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a root that is a symlink: %v, want ErrInvalid", err)
	}
}

// ListTree lists every path below dir, to tell whether a root changed.
func ListTree(t *testing.T, dir string) string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		paths = append(paths, strings.TrimPrefix(p, dir))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(paths, " ")
}

// CopyProgram copies the dynamically linked program at host path src to
// dst inside root, with its interpreter and the libraries it needs at
// their own paths, to build a root for Spec.Root.
func CopyProgram(t *testing.T, src, root, dst string) {
	t.Helper()
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatalf("copy %s: %v", from, err)
		}
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(to)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, to), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(src, dst)
	seen := map[string]bool{}
	var copyDeps func(bin string)
	copyDeps = func(bin string) {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("read %s: %v", bin, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					t.Fatal(err)
				}
				interp := strings.TrimRight(string(b), "\x00")
				if !seen[interp] {
					seen[interp] = true
					copyFile(interp, interp)
				}
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			t.Fatal(err)
		}
		for _, lib := range libs {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			found := false
			for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
				p := filepath.Join(dir, lib)
				if _, err := os.Stat(p); err == nil {
					copyFile(p, p)
					copyDeps(p)
					found = true
					break
				}
			}
			if !found {
				t.Skipf("cannot find %s, which %s needs, to build a root", lib, bin)
			}
		}
	}
	copyDeps(src)
}
