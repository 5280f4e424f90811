package packaging

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// unit is a systemd unit file: its settings by section and key, in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: cannot read %q", path, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one returns the one value of a [Service] key, "" when it is not set.
func (u unit) one(t *testing.T, key string) string {
	t.Helper()
	vs := u["Service"][key]
	if len(vs) > 1 {
		t.Fatalf("[Service] %s is set %d times", key, len(vs))
	}
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// systemdOnly are the unit's settings that only systemd as PID 1 applies
// (restarts, the cgroup it delegates, seccomp filters and kernel
// protections of its own), so the run of ExecStart without systemd leaves
// them out; systemd-analyze verify and security check them.
var systemdOnly = []string{
	"Type", "Restart", "RestartSec", "TimeoutStopSec", "KillMode", "Delegate", "TasksMax",
	"StateDirectoryMode", "RuntimeDirectoryMode", "RuntimeDirectoryPreserve", "UMask",
	"ProtectKernelModules", "ProtectKernelLogs", "ProtectClock", "ProtectHostname",
	"RestrictSUIDSGID", "RestrictRealtime", "LockPersonality", "SystemCallArchitectures",
	"SystemCallFilter", "RestrictAddressFamilies",
}

// bwrapArgs turns the unit's [Service] section into a bubblewrap command
// line that runs ExecStart in the Debian root as the unit would: the same
// command, the same capability bounding set, no new privileges, a
// read-only system but for the state, cache and runtime directories, no /home,
// private /tmp and /dev. Every setting of the unit is either applied here
// or listed in systemdOnly, so a new one needs a decision. runDir is the
// host directory bound as /run/airlock (see the caller).
func bwrapArgs(t *testing.T, u unit, root, runDir string) []string {
	t.Helper()
	// The host's /proc as it is: a sandbox can mount its own proc only where
	// one is fully visible (bwrap's --proc covers parts of it).
	args := []string{"--die-with-parent", "--info-fd", "3", "--bind", "/proc", "/proc", "--bind", "/sys", "/sys"}
	done := map[string]bool{}
	apply := func(key string, f func(v string)) {
		done[key] = true
		if v := u.one(t, key); v != "" {
			f(v)
		}
	}
	rootMode := "--bind"
	apply("ProtectSystem", func(v string) {
		if v != "strict" {
			t.Fatalf("ProtectSystem=%s: the test emulates strict only", v)
		}
		rootMode = "--ro-bind"
	})
	args = append([]string{rootMode, root, "/"}, args...)
	apply("StateDirectory", func(v string) {
		for _, name := range strings.Fields(v) {
			dir := "/var/lib/" + name
			if err := os.MkdirAll(filepath.Join(root, dir), 0o700); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--bind", filepath.Join(root, dir), dir)
		}
	})
	apply("CacheDirectory", func(v string) {
		for _, name := range strings.Fields(v) {
			dir := "/var/cache/" + name
			if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--bind", filepath.Join(root, dir), dir)
		}
	})
	apply("RuntimeDirectory", func(v string) {
		args = append(args, "--bind", runDir, "/run/"+v)
	})
	apply("ProtectHome", func(v string) {
		if v == "yes" {
			args = append(args, "--tmpfs", "/home", "--tmpfs", "/root", "--tmpfs", "/run/user")
		}
	})
	apply("PrivateTmp", func(v string) {
		if v == "yes" {
			args = append(args, "--tmpfs", "/tmp", "--tmpfs", "/var/tmp")
		}
	})
	devices := []string{"--dev-bind", "/dev", "/dev"}
	apply("PrivateDevices", func(v string) {
		if v == "yes" {
			devices = []string{"--dev", "/dev"}
		}
	})
	args = append(args, devices...)
	args = append(args, "--cap-drop", "ALL")
	apply("CapabilityBoundingSet", func(v string) {
		have := boundingSet(t)
		for _, c := range strings.Fields(v) {
			bit, ok := capBits[c]
			if !ok {
				t.Fatalf("CapabilityBoundingSet: %s is not in this test's table", c)
			}
			if have&(1<<bit) == 0 {
				t.Logf("this host withholds %s from root: the daemon runs without it", c)
				continue
			}
			args = append(args, "--cap-add", c)
		}
	})
	// bwrap always sets no_new_privs: the unit must ask for it too, or this
	// run would not be the unit's.
	apply("NoNewPrivileges", func(v string) {
		if v != "yes" {
			t.Fatalf("NoNewPrivileges=%s: bwrap cannot run without no_new_privs", v)
		}
	})
	var argv []string
	apply("ExecStart", func(v string) { argv = strings.Fields(v) })
	if len(argv) == 0 {
		t.Fatal("the unit has no ExecStart")
	}
	for k := range u["Service"] {
		if !done[k] && !slices.Contains(systemdOnly, k) {
			t.Errorf("the unit sets %s, which this test neither applies nor lists as systemd's own: decide", k)
		}
	}
	// The read-only root needs the mount points; systemd makes them too.
	for i, a := range args {
		if (a == "--bind" || a == "--tmpfs") && i+2 < len(args) {
			dst := args[i+2]
			if a == "--tmpfs" {
				dst = args[i+1]
			}
			if err := os.MkdirAll(filepath.Join(root, dst), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	args = append(args, "--clearenv", "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--chdir", "/", "--")
	return append(args, argv...)
}

// capBits are the capabilities the unit may name.
var capBits = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
	"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID, "CAP_SETUID": unix.CAP_SETUID,
	"CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_NET_ADMIN": unix.CAP_NET_ADMIN, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT,
	"CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
	"CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "CAP_SETFCAP": unix.CAP_SETFCAP,
}

// boundingSet is this process's capability bounding set.
func boundingSet(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return 0
}

// unitString shows a unit's [Service] for a failure message.
func (u unit) String() string {
	var b strings.Builder
	for k, vs := range u["Service"] {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
	}
	return b.String()
}
