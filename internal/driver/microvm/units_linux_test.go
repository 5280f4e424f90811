package microvm

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// readCPIO parses a newc archive back: name to (mode, data).
func readCPIO(t *testing.T, b []byte) map[string]struct {
	mode uint64
	data string
} {
	t.Helper()
	out := map[string]struct {
		mode uint64
		data string
	}{}
	pad := func(n int) int { return (4 - n%4) % 4 }
	for off := 0; ; {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return v
		}
		mode, size, namesize := field(1), int(field(6)), int(field(11))
		name := string(b[off+110 : off+110+namesize-1])
		off += 110 + namesize
		off += pad(110 + namesize)
		data := string(b[off : off+size])
		off += size + pad(size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = struct {
			mode uint64
			data string
		}{mode, data}
	}
}

func TestCPIO(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIO(&buf)
	c.Dir("/modules", 0o755)
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, []byte("agent!"))
	c.File("modules/a.ko", 0o644, []byte("12345"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	for name, want := range map[string]struct {
		mode uint64
		data string
	}{
		"modules": {0o040755, ""}, "dev/console": {0o020600, ""}, "init": {0o100755, "agent!"}, "modules/a.ko": {0o100644, "12345"},
	} {
		if got[name] != want {
			t.Errorf("%s: %+v, want %+v", name, got[name], want)
		}
	}
	if err := newCPIO(&buf).Close(); err != nil {
		t.Fatal(err)
	}
	bad := newCPIO(&bytes.Buffer{})
	bad.File("../escape", 0o644, nil)
	if err := bad.Close(); err == nil {
		t.Error("an entry named ../escape was written")
	}
}

func TestDpkgClosure(t *testing.T) {
	status := `Package: app
Status: install ok installed
Architecture: amd64
Version: 1.0
Depends: libfoo (>= 2), virt | missing, libc6:any
Pre-Depends: dpkg

Package: libfoo
Status: install ok installed
Architecture: amd64
Version: 2.1
Depends: libc6

Package: provider
Status: install ok installed
Architecture: all
Version: 3
Provides: virt (= 1)

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36
Description: the C library
 with a continued line

Package: dpkg
Status: install ok installed
Architecture: amd64
Version: 1.21

Package: removed
Status: deinstall ok config-files
Architecture: amd64
Version: 9
`
	pkgs, err := parseDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pkgs["removed"]; ok {
		t.Error("a removed package counts as installed")
	}
	c, err := packageClosure(pkgs, []string{"app"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range c {
		names = append(names, p.Name+"="+p.Version)
	}
	if got, want := strings.Join(names, " "), "app=1.0 dpkg=1.21 libc6=2.36 libfoo=2.1 provider=3"; got != want {
		t.Errorf("closure: %s, want %s", got, want)
	}
	if _, err := packageClosure(pkgs, []string{"nope"}); err == nil || !strings.Contains(err.Error(), "apt-get install nope") {
		t.Errorf("a root that is not installed: %v", err)
	}
}

// A left-out package (python3-debugpy: gdb and more) is not in a closure
// though a package of it depends on it and it is installed; an optional
// root that is not installed is left out.
func TestDpkgClosureLeavesOut(t *testing.T) {
	status := `Package: python3-ipykernel
Status: install ok installed
Version: 6.17.0-1
Depends: python3-debugpy, python3-tornado

Package: python3-debugpy
Status: install ok installed
Version: 1.6.3
Depends: gdb

Package: gdb
Status: install ok installed
Version: 13.1

Package: python3-tornado
Status: install ok installed
Version: 6.2
`
	pkgs, err := parseDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	c, err := packageClosure(pkgs, []string{"python3-ipykernel", "python3-jupyter-client?"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range c {
		names = append(names, p.Name)
	}
	if got, want := strings.Join(names, " "), "python3-ipykernel python3-tornado"; got != want {
		t.Errorf("closure: %s, want %s", got, want)
	}
}

func TestSizes(t *testing.T) {
	for _, tt := range []struct {
		limit int64
		want  int
	}{{128 << 20, 256}, {512 << 20, 640}, {4 << 20, 256}, {129 << 20, 384}} {
		if got := guestMemoryMiB(tt.limit); got != tt.want {
			t.Errorf("guestMemoryMiB(%d MiB) = %d, want %d", tt.limit>>20, got, tt.want)
		}
	}
	if vcpus(0.5) != 1 || vcpus(1) != 1 || vcpus(1.5) < 1 || vcpus(1e6) < 1 {
		t.Errorf("vcpus: 0.5→%d 1→%d 1.5→%d", vcpus(0.5), vcpus(1), vcpus(1.5))
	}
}

func TestQEMUArgs(t *testing.T) {
	q := &qemu{path: "/usr/bin/qemu-system-x86_64", version: "7.2"}
	ram, state := mustTemp(t), mustTemp(t)
	m := &machine{Accel: "tcg", VCPUs: 1, MemoryMiB: 256, Kernel: "/k", Initramfs: "/i", Cmdline: "console=ttyS0",
		RootImage: "/c/root,1.ext4", RAM: ram, State: state}
	args := strings.Join(q.args(m), " ")
	for _, want := range []string{
		"-nodefaults", "-no-reboot", "-machine microvm,memory-backend=ram", "-accel tcg,tb-size=128",
		"memory-backend-file,id=ram,size=256M,mem-path=/dev/fd/5,share=off", "-incoming defer",
		"file=/c/root,,1.ext4,format=raw,if=none,id=root,readonly=on", "-chardev socket,id=agent,fd=3",
		"-chardev socket,id=qmp,fd=4", "-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("QEMU's arguments lack %q:\n%s", want, args)
		}
	}
	for _, never := range []string{"-netdev", "-nic", "-net ", "virtio-net", "9p", "-virtfs"} {
		if strings.Contains(args, never) {
			t.Errorf("QEMU's arguments give the guest a network or a host directory (%q):\n%s", never, args)
		}
	}
	m.RAM, m.State, m.Accel = nil, nil, "kvm"
	args = strings.Join(q.args(m), " ")
	if strings.Contains(args, "-incoming") || strings.Contains(args, "memory-backend") || !strings.Contains(args, "-accel kvm -cpu host") {
		t.Errorf("a cold KVM machine: %s", args)
	}
}

func TestCmdline(t *testing.T) {
	d := &Driver{opts: Options{Accel: "tcg", KernelArgs: []string{"panic=0"}}}
	d.accelOnce.Do(func() { d.accel, d.tscKHz = "tcg", 2596121 })
	got := d.cmdline()
	if !strings.HasSuffix(got, " panic=0 -- --guest") || !strings.Contains(got, "tsc_early_khz=2596121 tsc=reliable") || !strings.Contains(got, "rdinit=/init") {
		t.Errorf("cmdline: %q", got)
	}
}

func mustTemp(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestResolveModules: the guest's modules come with what they depend on,
// each after its dependencies (read from the cached cloud kernel's own
// .modinfo: its package has no modules.dep).
func TestResolveModules(t *testing.T) {
	k, err := currentKernel(cacheRoot(""))
	if err != nil {
		testcap.SkipOrFail(t, "qemu", "no guest kernel in the cache: %v", err)
	}
	mods, err := resolveModules(k.ModulesDir(), guestModules)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range mods {
		names = append(names, moduleName(m))
	}
	pos := func(n string) int { return slices.Index(names, n) }
	for _, n := range []string{"virtio_ring", "virtio", "virtio_mmio", "virtio_console", "virtio_blk"} {
		if pos(n) < 0 {
			t.Fatalf("modules %v lack %s", names, n)
		}
	}
	if !(pos("virtio_ring") < pos("virtio") && pos("virtio") < pos("virtio_mmio") && pos("virtio") < pos("virtio_blk")) {
		t.Errorf("modules %v are not in dependency order", names)
	}
	if _, err := resolveModules(k.ModulesDir(), []string{"no_such_module"}); err == nil || !strings.Contains(err.Error(), "no module no_such_module") {
		t.Errorf("a module the kernel lacks: %v", err)
	}
}

// TestTreeDigest: links are hashed as links (even one that leads out of
// the directory), contents count when asked for, a missing name is none.
func TestTreeDigest(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc/passwd", dir+"/out"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir+"/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/d/e/f", []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"out", "d", "missing"}
	a, err := treeDigest(dir, names, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/d/e/f", []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := treeDigest(dir, names, true)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("the digest did not change with a file's content")
	}
	if _, err := treeDigest(dir, nil, false); err != nil {
		t.Errorf("a walk of the whole directory: %v", err)
	}
}
