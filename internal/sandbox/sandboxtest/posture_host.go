package sandboxtest

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// hostIdentifiers are the /proc files of the shared list of what a sandbox
// must not see (sandbox.MaskedProc, the boot id); a sandbox must not see
// the host's content of any of them (an empty or absent file, or its own
// value, will do). docs/decisions.md lists what a sandbox sees of the host
// on purpose (kernel version, CPU model, memory size, load, boot time) and
// why.
func hostIdentifiers() []string {
	out := []string{sandbox.BootIDFile}
	for _, name := range sandbox.MaskedProc {
		out = append(out, "/proc/"+name)
	}
	return out
}

// testHostIdentity: a command cannot read what identifies this host: its
// boot id (each sandbox has its own), its kernel's command line and build
// configuration, its disks, memory layout, kernel symbols, consoles, and
// the host's file locks; nor the host's resolvers, nor the paths of a
// container engine's own files in the mount table.
func testHostIdentity(t *testing.T, e *env) {
	for _, f := range hostIdentifiers() {
		fi, err := os.Stat(f)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
			continue // a directory, or /proc/kcore: nothing to compare
		}
		host, err := os.ReadFile(f)
		if err != nil || len(strings.TrimSpace(string(host))) == 0 {
			continue // nothing of the host to leak here
		}
		o := e.run(t, execArgv("cat", f))
		inside := strings.TrimSpace(o.stdout)
		if inside == "" {
			continue
		}
		if inside == strings.TrimSpace(string(host)) {
			t.Errorf("%s inside the sandbox is the host's own (%d bytes)", f, len(host))
		}
		if f == sandbox.BootIDFile && len(inside) != 36 {
			t.Errorf("the sandbox's boot id %q is not a UUID", inside)
		}
	}
	t.Run("resolvers", func(t *testing.T) { testHostResolvers(t, e) })
	t.Run("engine_paths", func(t *testing.T) { testEnginePaths(t, e) })
	// The boot id is the sandbox's own, not one shared by all sandboxes:
	// another sandbox of the same driver has another.
	other := e.create(t, e.spec)
	var a, b syncBuffer
	e.runIn(t, e.sb, execArgv("cat", sandbox.BootIDFile), &a)
	e.runIn(t, other, execArgv("cat", sandbox.BootIDFile), &b)
	if a.String() != "" && a.String() == b.String() {
		t.Errorf("two sandboxes share the boot id %q", a.String())
	}
}

// testHostResolvers: no resolver of the host's /etc/resolv.conf shows in
// the sandbox's (a loopback one names nothing).
func testHostResolvers(t *testing.T, e *env) {
	host, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Skipf("the host has no /etc/resolv.conf: %v", err)
	}
	inside := e.run(t, execArgv("cat", "/etc/resolv.conf")).stdout
	for _, line := range strings.Split(string(host), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && a.IsLoopback() {
			continue
		}
		for _, in := range strings.Split(inside, "\n") {
			if g := strings.Fields(in); len(g) >= 2 && g[0] == "nameserver" && g[1] == f[1] {
				t.Errorf("the sandbox's /etc/resolv.conf names the host's resolver %s:\n%s", f[1], inside)
			}
		}
	}
}

// testEnginePaths: what is mounted on the files of /etc a runtime writes
// itself (sandbox.EngineEtc) does not come from a host directory: the
// mount table would name it (a container engine's data root, the
// container's own directory in it).
func testEnginePaths(t *testing.T, e *env) {
	o := e.run(t, execArgv("cat", "/proc/self/mountinfo"))
	expectExit(t, "cat /proc/self/mountinfo", o, 0)
	for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !slices.Contains(sandbox.EngineEtc, f[4]) || f[3] == "/" {
			continue
		}
		if _, err := os.Lstat(f[3]); err == nil && f[3] != f[4] {
			t.Errorf("the sandbox's %s is mounted from the host's %s, which its mount table shows: %s", f[4], f[3], line)
		}
	}
}
