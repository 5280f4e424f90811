package gvisor

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// hostDir makes a host directory holding name with content, readable by
// everyone.
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

func TestMounts(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)

	t.Run("read_only_by_default", func(t *testing.T) {
		dir := hostDir(t, "data.txt", "host data\n")
		file := filepath.Join(hostDir(t, "single.txt", "single file\n"), "single.txt")
		in := sandboxT(t, d, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{
			{Source: dir, Target: "/mnt/data"},
			{Source: file, Target: "/workspace/single.txt"},
		}})
		if out, _, res := run(t, in, "cat", "/mnt/data/data.txt", "/workspace/single.txt"); res.ExitCode != 0 || out != "host data\nsingle file\n" {
			t.Errorf("reading the mounts: %q, %+v", out, res)
		}
		for _, script := range []string{"touch /mnt/data/new", "echo x > /mnt/data/data.txt", "rm /mnt/data/data.txt", "echo x > /workspace/single.txt"} {
			if _, _, res := run(t, in, "sh", "-c", script); res.ExitCode == 0 {
				t.Errorf("%s succeeded on a read-only mount", script)
			}
		}
		if err := in.Files().WriteFile(t.Context(), "/mnt/data/api.txt", strings.NewReader("x"), 0o644); err == nil {
			t.Errorf("WriteFile on a read-only mount succeeded")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "data.txt")); string(b) != "host data\n" {
			t.Errorf("the host file changed: %q", b)
		}
		if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
			t.Errorf("a file appeared in the read-only host directory")
		}
		// Pinned mounts are gone from the host once runsc has its own.
		if left := mountsBelow(filepath.Join(d.bundlesDir(), in.ID())); len(left) > 0 {
			t.Errorf("the sandbox's mounts are still attached on the host: %v", left)
		}
	})

	t.Run("writable", func(t *testing.T) {
		dir := hostDir(t, "data.txt", "host data\n")
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		in := sandboxT(t, d, sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: dir, Target: "/mnt/rw", Writable: true}}})
		if _, errOut, res := run(t, in, "sh", "-c", "echo from-sandbox > /mnt/rw/new.txt"); res.ExitCode != 0 {
			t.Fatalf("writing to a writable mount: %+v %s", res, errOut)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "new.txt")); err != nil || string(b) != "from-sandbox\n" {
			t.Errorf("the host sees %q, %v", b, err)
		}
	})

	t.Run("symlink_refused", func(t *testing.T) {
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
		for _, src := range []string{link, filepath.Join(parentLink, filepath.Base(real))} {
			in, err := d.Create(t.Context(), sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: src, Target: "/mnt/x"}}})
			if err == nil {
				in.Close(context.Background())
				t.Errorf("a mount whose source %s holds a symlink was accepted", src)
				continue
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("mount source %s with a symlink: %v, want ErrInvalid", src, err)
			}
		}
		_, err := d.Create(t.Context(), sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: filepath.Join(base, "missing"), Target: "/mnt/x"}}})
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a missing mount source: %v, want ErrNotFound", err)
		}
	})

	t.Run("swap_race", func(t *testing.T) { testMountSwapRace(t, d) })
}

// testMountSwapRace swaps a mount's source directory with a symlink to a
// directory holding a canary, atomically and in a tight loop, while
// sandboxes are made from it. No sandbox may ever see the canary: each
// either mounts the original directory or fails.
func testMountSwapRace(t *testing.T, d *Driver) {
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
			if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
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
	const iterations = 20
	var mounted, refused int
	for range iterations {
		in, err := d.Create(t.Context(), sandbox.Spec{Limits: smallLimits, Mounts: []sandbox.Mount{{Source: src, Target: "/mnt/m"}}})
		if err != nil {
			refused++
			continue
		}
		mounted++
		var out strings.Builder
		res, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: []string{"sh", "-c", "cat /mnt/m/marker"}, Stdout: &out})
		if cerr := in.Close(context.Background()); cerr != nil {
			t.Errorf("close: %v", cerr)
		}
		(&leakChecker{}).check(t, in.ID())
		if err != nil || res.ExitCode != 0 {
			t.Errorf("read the mount: %v %+v", err, res)
			continue
		}
		if out.String() != "original\n" {
			t.Fatalf("a sandbox made while the source was swapped for a symlink sees %q; want only the original directory", out.String())
		}
	}
	t.Logf("%d sandboxes mounted the original directory, %d were refused, %d swaps", mounted, refused, swaps.Load())
	if swaps.Load() < iterations {
		t.Errorf("the swapper made only %d swaps: the race was not exercised", swaps.Load())
	}
}

func TestRoot(t *testing.T) {
	requireGVisor(t)
	d := newDriver(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"proc", "dev", "tmp", "workspace", "bin", "etc"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyProgram(t, "/bin/sh", root, "/bin/sh")
	marker := fmt.Sprintf("root-marker-%d", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(root, "etc", "marker"), []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := sandboxT(t, d, sandbox.Spec{Root: root, Limits: smallLimits})
	// Built-ins only: the prepared root holds nothing but sh.
	script := `read m < /etc/marker; echo "$m"
[ -e /usr/bin/python3 ] && echo host-usr
[ -e /etc/passwd ] && echo composed-etc
echo data > /workspace/f && read w < /workspace/f && echo "$w"
(echo x > /newfile) 2>/dev/null && echo wrote-root
(echo x > /etc/newfile) 2>/dev/null && echo wrote-etc
echo end`
	out, errOut, res := run(t, in, "/bin/sh", "-c", script)
	if want := marker + "\ndata\nend\n"; out != want || res.ExitCode != 0 {
		t.Errorf("in the prepared root: stdout %q, stderr %q, %+v; want %q", out, errOut, res, want)
	}
	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); !strings.HasPrefix(got, "bin dev etc lib") || strings.Contains(got, "usr") {
		t.Errorf("the host's root directory changed: %v", names)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) > 0 {
		t.Errorf("mount points were made in the host's root directory: /tmp holds %v", entries)
	}
	for _, p := range []string{"newfile", "etc/newfile", "workspace/f"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("the sandbox wrote %s into the host's root directory", p)
		}
	}

	t.Run("symlink_refused", func(t *testing.T) {
		link := filepath.Join(t.TempDir(), "root-link")
		if err := os.Symlink(root, link); err != nil {
			t.Fatal(err)
		}
		if in, err := d.Create(t.Context(), sandbox.Spec{Root: link}); err == nil {
			in.Close(context.Background())
			t.Errorf("a root that is a symlink was accepted")
		} else if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("a root that is a symlink: %v, want ErrInvalid", err)
		}
	})
	t.Run("bare", func(t *testing.T) {
		// Unlike the native driver, gVisor needs no mount points in the
		// root: the bundle's own root holds them.
		bare := t.TempDir()
		if err := os.Chmod(bare, 0o755); err != nil {
			t.Fatal(err)
		}
		copyProgram(t, "/bin/sh", bare, "/bin/sh")
		before := listTree(t, bare)
		in := sandboxT(t, d, sandbox.Spec{Root: bare, Limits: smallLimits})
		if out, errOut, res := run(t, in, "/bin/sh", "-c", "echo ok > /workspace/f && read x < /workspace/f && echo $x"); out != "ok\n" || res.ExitCode != 0 {
			t.Errorf("in a bare root: %q %q %+v", out, errOut, res)
		}
		if after := listTree(t, bare); after != before {
			t.Errorf("the host's bare root changed:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// listTree lists every path below dir.
func listTree(t *testing.T, dir string) string {
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

// copyProgram copies the dynamically linked program at host path src to
// dst inside root, with its interpreter and libraries at their own paths.
func copyProgram(t *testing.T, src, root, dst string) {
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
	f, err := elf.Open(src)
	if err != nil {
		t.Fatalf("read %s: %v", src, err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp := strings.TrimRight(string(b), "\x00")
				real, _ := filepath.EvalSymlinks(interp)
				copyFile(real, interp)
			}
		}
	}
	for _, lib := range libs {
		for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/lib"} {
			p := filepath.Join(dir, lib)
			if real, err := filepath.EvalSymlinks(p); err == nil {
				copyFile(real, p)
				break
			}
		}
	}
}
