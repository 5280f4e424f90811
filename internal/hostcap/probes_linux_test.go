package hostcap

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runsc"
	"golang.org/x/sys/unix"
)

// skipOrFail skips the test, or fails it when AIRLOCK_TEST_REQUIRE names the
// capability. (testcap offers this to other packages; it imports hostcap, so
// hostcap's own tests cannot use it.)
func skipOrFail(t *testing.T, name, format string, args ...any) {
	t.Helper()
	for _, n := range strings.Split(os.Getenv("AIRLOCK_TEST_REQUIRE"), ",") {
		if strings.TrimSpace(n) == name {
			t.Fatalf("AIRLOCK_TEST_REQUIRE names %s: "+format, append([]any{name}, args...)...)
		}
	}
	t.Skipf(format, args...)
}

// probeTimed runs one probe and fails the test when it takes far longer
// than it should.
func probeTimed(t *testing.T, name string, limit time.Duration) Result {
	t.Helper()
	start := time.Now()
	r := Probe(context.Background(), name)
	if d := time.Since(start); d > limit {
		t.Errorf("Probe(%q) took %v, want under %v", name, d, limit)
	}
	t.Logf("%s: ok=%v detail=%q why=%q fix=%q", r.Name, r.OK, r.Detail, r.Why, r.Fix)
	if r.Name != name {
		t.Errorf("Name = %q, want %q", r.Name, name)
	}
	if r.OK && (r.Why != "" || r.Fix != "") {
		t.Errorf("OK result has Why %q / Fix %q", r.Why, r.Fix)
	}
	if !r.OK && (r.Why == "" || r.Fix == "") {
		t.Errorf("missing capability without Why %q or Fix %q", r.Why, r.Fix)
	}
	return r
}

// readTrim reads a small file, "" when it cannot be read.
func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestRoot(t *testing.T) {
	r := probeTimed(t, "root", time.Second)
	if got, want := r.OK, os.Geteuid() == 0; got != want {
		t.Fatalf("root OK = %v, want %v (euid %d)", got, want, os.Geteuid())
	}
	if !r.OK && !strings.Contains(r.Why, strconv.Itoa(os.Geteuid())) {
		t.Errorf("Why %q does not name the uid", r.Why)
	}
}

func TestUserns(t *testing.T) {
	r := probeTimed(t, "userns", 5*time.Second)
	if maxNS := readTrim("/proc/sys/user/max_user_namespaces"); maxNS != "" && !strings.Contains(r.Detail+r.Why, "user.max_user_namespaces="+maxNS) {
		t.Errorf("result does not report user.max_user_namespaces=%s", maxNS)
	}
	// Root that no seccomp filter restricts can always create user
	// namespaces unless the sysctl forbids them.
	unfiltered := readStatus(t, "Seccomp") == "0"
	if os.Geteuid() == 0 && unfiltered && readTrim("/proc/sys/user/max_user_namespaces") != "0" {
		if !r.OK {
			t.Fatalf("userns not OK for unconfined root: %s", r.Why)
		}
		return
	}
	if !r.OK {
		skipOrFail(t, "userns", "user namespaces do not work here: %s", r.Why)
	}
}

func readStatus(t *testing.T, field string) string {
	t.Helper()
	v, err := statusField(field)
	if err != nil {
		t.Fatalf("statusField(%q): %v", field, err)
	}
	return v
}

func TestUsernsHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := Probe(ctx, "userns"); r.OK {
		t.Fatalf("userns probe with a cancelled context = OK, want not OK")
	}
}

func TestSeccomp(t *testing.T) {
	r := probeTimed(t, "seccomp", time.Second)
	actions := readTrim("/proc/sys/kernel/seccomp/actions_avail")
	if slices.Contains(strings.Fields(actions), "kill_process") {
		if !r.OK {
			t.Fatalf("seccomp not OK although the kernel offers %q: %s", actions, r.Why)
		}
		return
	}
	if r.OK {
		t.Fatalf("seccomp OK although /proc/sys/kernel/seccomp/actions_avail = %q", actions)
	}
	skipOrFail(t, "seccomp", "no seccomp filters here: %s", r.Why)
}

func TestLandlock(t *testing.T) {
	r := probeTimed(t, "landlock", time.Second)
	lsm := readTrim("/sys/kernel/security/lsm")
	if !slices.Contains(strings.Split(lsm, ","), "landlock") {
		if !r.OK {
			skipOrFail(t, "landlock", "no Landlock here (lsm %q): %s", lsm, r.Why)
		}
		return
	}
	if !r.OK {
		t.Fatalf("landlock not OK although the active LSMs are %q: %s", lsm, r.Why)
	}
	abi, err := strconv.Atoi(strings.TrimPrefix(r.Detail, "ABI "))
	if err != nil || abi < 1 {
		t.Fatalf("landlock Detail = %q, want \"ABI n\" with n ≥ 1", r.Detail)
	}
}

// leftoverProbeCgroups lists airlock-probe-* cgroups of this process.
func leftoverProbeCgroups(t *testing.T, dirs ...string) []string {
	t.Helper()
	var left []string
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d, "airlock-probe-"+strconv.Itoa(os.Getpid())+"-*"))
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, m...)
	}
	return left
}

func TestCgroupV1(t *testing.T) {
	cm, err := readCgroupMounts()
	if err != nil {
		t.Fatalf("readCgroupMounts: %v", err)
	}
	r := probeTimed(t, "cgroupv1", 2*time.Second)
	var dirs []string
	writable := os.Geteuid() == 0
	for _, c := range v1Required {
		p, ok := cm.V1[c]
		if !ok {
			writable = false
			continue
		}
		dirs = append(dirs, p)
		if unix.Access(p, unix.W_OK) != nil {
			writable = false
		}
	}
	if left := leftoverProbeCgroups(t, dirs...); len(left) > 0 {
		t.Errorf("probe left cgroups behind: %v", left)
	}
	if len(dirs) < len(v1Required) {
		if r.OK {
			t.Fatalf("cgroupv1 OK although only %v of %v are mounted", dirs, v1Required)
		}
		skipOrFail(t, "cgroupv1", "cgroup v1 is not mounted here: %s", r.Why)
	}
	if writable && !r.OK {
		t.Fatalf("cgroupv1 not OK for root with writable hierarchies %v: %s", dirs, r.Why)
	}
	if !r.OK {
		skipOrFail(t, "cgroupv1", "cgroup v1 does not work here: %s", r.Why)
	}
}

func TestCgroupV2(t *testing.T) {
	cm, err := readCgroupMounts()
	if err != nil {
		t.Fatalf("readCgroupMounts: %v", err)
	}
	r := probeTimed(t, "cgroupv2", 2*time.Second)
	if cm.V2 == "" {
		if r.OK {
			t.Fatal("cgroupv2 OK without a cgroup2 mount")
		}
		skipOrFail(t, "cgroupv2", "no cgroup2 mount here: %s", r.Why)
	}
	if left := leftoverProbeCgroups(t, cm.V2); len(left) > 0 {
		t.Errorf("probe left cgroups behind: %v", left)
	}
	controllers := parseControllers(readTrim(filepath.Join(cm.V2, "cgroup.controllers")))
	if len(missing(v2Required, controllers)) > 0 {
		if r.OK {
			t.Fatalf("cgroupv2 OK although %s offers only %v", cm.V2, controllers)
		}
		skipOrFail(t, "cgroupv2", "cgroup v2 lacks controllers here: %s", r.Why)
	}
	if os.Geteuid() == 0 && unix.Access(cm.V2, unix.W_OK) == nil && !r.OK {
		t.Fatalf("cgroupv2 not OK for root with %v at writable %s: %s", controllers, cm.V2, r.Why)
	}
	if !r.OK {
		skipOrFail(t, "cgroupv2", "cgroup v2 does not work here: %s", r.Why)
	}
}

// TestCgroupV2Hybrid checks what the probe says on a hybrid host whose
// cgroup2 mount offers only hugetlb, as the development machine's does.
func TestCgroupV2Hybrid(t *testing.T) {
	const file = "/sys/fs/cgroup/unified/cgroup.controllers"
	if got := readTrim(file); got != "hugetlb" {
		t.Skipf("not a hybrid host with only hugetlb on cgroup2 (%s = %q)", file, got)
	}
	r := probeTimed(t, "cgroupv2", 2*time.Second)
	if r.OK {
		t.Fatalf("cgroupv2 OK although %s offers only hugetlb", file)
	}
	for _, word := range []string{"hybrid", "hugetlb"} {
		if !strings.Contains(r.Why, word) {
			t.Errorf("Why %q does not mention %q", r.Why, word)
		}
	}
}

func TestCgroupMode(t *testing.T) {
	cm, err := readCgroupMounts()
	if err != nil {
		t.Fatalf("readCgroupMounts: %v", err)
	}
	if got, want := CgroupMode(), cm.Mode(); got != want {
		t.Fatalf("CgroupMode() = %q, want %q", got, want)
	}
	if exists("/sys/fs/cgroup/unified/cgroup.controllers") && exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") {
		if got := CgroupMode(); got != "hybrid" {
			t.Fatalf("CgroupMode() = %q on a hybrid layout, want hybrid", got)
		}
	}
}

func TestKVM(t *testing.T) {
	r := probeTimed(t, "kvm", 2*time.Second)
	switch {
	case !exists("/dev/kvm"):
		if r.OK || !strings.Contains(r.Why, "no /dev/kvm") {
			t.Fatalf("kvm = %+v without /dev/kvm, want not OK saying so", r)
		}
		skipOrFail(t, "kvm", "no /dev/kvm here")
	case unix.Access("/dev/kvm", unix.R_OK|unix.W_OK) != nil:
		if r.OK || !strings.Contains(r.Why, "permission denied") {
			t.Fatalf("kvm = %+v with /dev/kvm not accessible, want not OK saying permission denied", r)
		}
		skipOrFail(t, "kvm", "cannot use /dev/kvm here: %s", r.Why)
	case isPVM(kvmModules()):
		if r.OK || !strings.Contains(r.Why, "PVM") || !strings.Contains(r.Why, "TCG") {
			t.Fatalf("kvm = %+v on a kvm_pvm host, want not OK naming PVM and TCG", r)
		}
		if !strings.Contains(r.Detail, "API 12") {
			t.Errorf("Detail %q does not report the API version", r.Detail)
		}
	case !r.OK:
		skipOrFail(t, "kvm", "KVM does not work here: %s", r.Why)
	default:
		if !strings.Contains(r.Detail, "API 12") {
			t.Errorf("Detail %q does not report the API version", r.Detail)
		}
	}
}

// lookPathIn says whether a program is on PATH.
func lookPathIn(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func TestTools(t *testing.T) {
	qemu, qemuPkg := qemuBinary()
	tests := []struct {
		name, bin, fix string
		limit          time.Duration
	}{
		{name: "runsc", bin: "runsc", fix: "apt-get install runsc", limit: 45 * time.Second},
		{name: "qemu", bin: qemu, fix: "apt-get install " + qemuPkg, limit: 15 * time.Second},
		{name: "bwrap", bin: "bwrap", fix: "apt-get install bubblewrap", limit: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := probeTimed(t, tt.name, tt.limit)
			installed := lookPathIn(tt.bin)
			if tt.name == "runsc" {
				// The runsc airlock uses need not be on PATH.
				_, err := runsc.Find(context.Background())
				installed = !errors.Is(err, runsc.ErrNotFound)
			}
			if !installed {
				if r.OK || !strings.Contains(r.Why, "not installed") || !strings.Contains(r.Fix, tt.fix) {
					t.Fatalf("%s = %+v without %s on PATH, want not OK, \"not installed\", fix %q", tt.name, r, tt.bin, tt.fix)
				}
				skipOrFail(t, tt.name, "%s is not installed here", tt.bin)
			}
			if !r.OK {
				skipOrFail(t, tt.name, "%s does not work here: %s", tt.bin, r.Why)
			}
			if r.Detail == "" {
				t.Errorf("%s Detail is empty, want the version", tt.name)
			}
		})
	}
}

// fakeTools puts shell scripts on a fresh PATH, where the probes find them
// (the runsc `make runsc` built is moved out of the way).
func fakeTools(t *testing.T, scripts map[string]string) {
	t.Helper()
	pinned := runsc.Pinned
	runsc.Pinned = filepath.Join(t.TempDir(), "no-runsc")
	t.Cleanup(func() { runsc.Pinned = pinned })
	t.Setenv(runsc.Env, "")
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
}

func TestToolProbesWithFakes(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Fatalf("need /bin/sh for fake tools: %v", err)
	}
	qemu, _ := qemuBinary()
	tests := []struct {
		name       string
		probe      string
		scripts    map[string]string
		wantOK     bool
		wantDetail string
		wantWhy    string
	}{
		{
			name:       "old runsc falls back to ptrace",
			probe:      "runsc",
			scripts:    map[string]string{"runsc": `[ "$1" = --version ] && { echo "runsc version 0.0~2022"; echo "spec: 1.0.2"; exit 0; }; case "$*" in *systrap*) echo "unknown platform: systrap" >&2; exit 128;; esac; exit 0`},
			wantOK:     true,
			wantDetail: "runsc 0.0~2022, platform ptrace (systrap: unknown to this build); an old build without systrap: build a current one with `make runsc`",
		},
		{
			name:       "new runsc uses systrap",
			probe:      "runsc",
			scripts:    map[string]string{"runsc": `[ "$1" = --version ] && { echo "runsc version release-2026"; exit 0; }; exit 0`},
			wantOK:     true,
			wantDetail: "runsc release-2026, platform systrap",
		},
		{
			name:    "runsc that cannot run a sandbox",
			probe:   "runsc",
			scripts: map[string]string{"runsc": `[ "$1" = --version ] && { echo "runsc version x"; exit 0; }; echo "cannot create sandbox: boom" >&2; exit 1`},
			wantWhy: "cannot create sandbox: boom",
		},
		{
			name:       "qemu version",
			probe:      "qemu",
			scripts:    map[string]string{qemu: `[ "$1" = --version ] && { echo "QEMU emulator version 9.9.9 (fake)"; echo "Copyright"; exit 0; }; echo '{"QMP": {}}'; echo '{"return": {}}'`},
			wantOK:     true,
			wantDetail: qemu + " 9.9.9 (fake)",
		},
		{
			name:    "qemu without the microvm machine",
			probe:   "qemu",
			scripts: map[string]string{qemu: `[ "$1" = --version ] && { echo "QEMU emulator version 2.0 (fake)"; exit 0; }; echo "qemu: unsupported machine type" >&2; exit 1`},
			wantWhy: "unsupported machine type",
		},
		{
			name:    "qemu that crashes",
			probe:   "qemu",
			scripts: map[string]string{qemu: `echo "illegal instruction" >&2; exit 132`},
			wantWhy: "illegal instruction",
		},
		{
			name:       "bwrap works",
			probe:      "bwrap",
			scripts:    map[string]string{"bwrap": `[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }; exit 0`},
			wantOK:     true,
			wantDetail: "bubblewrap 0.8.0",
		},
		{
			name:    "bwrap cannot sandbox",
			probe:   "bwrap",
			scripts: map[string]string{"bwrap": `[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }; echo "bwrap: No permissions to create new namespace" >&2; exit 1`},
			wantWhy: "No permissions to create new namespace",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakeTools(t, tt.scripts)
			r := Probe(context.Background(), tt.probe)
			if r.OK != tt.wantOK {
				t.Fatalf("%s = %+v, want OK %v", tt.probe, r, tt.wantOK)
			}
			if tt.wantOK && r.Detail != tt.wantDetail {
				t.Errorf("Detail = %q, want %q", r.Detail, tt.wantDetail)
			}
			if !strings.Contains(r.Why, tt.wantWhy) {
				t.Errorf("Why = %q, want it to contain %q", r.Why, tt.wantWhy)
			}
		})
	}
}

func TestRunToolTimeout(t *testing.T) {
	fakeTools(t, map[string]string{"slow": "exec sleep 30"})
	t.Setenv("PATH", os.Getenv("PATH")+":/bin:/usr/bin")
	path, err := exec.LookPath("slow")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = RunTool(context.Background(), 100*time.Millisecond, path)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("runTool error = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("runTool took %v with a 100ms timeout", d)
	}
}

func TestProbeUnknown(t *testing.T) {
	r := Probe(context.Background(), "warp-drive")
	if r.OK || r.Name != "warp-drive" || !strings.Contains(r.Why, "unknown capability") {
		t.Fatalf("Probe(unknown) = %+v, want not OK, unknown capability", r)
	}
}

func TestAll(t *testing.T) {
	if !slices.Equal(slices.Sorted(slices.Values(Names)), slices.Sorted(maps.Keys(probes))) {
		t.Fatalf("Names %v and probes disagree", Names)
	}
	start := time.Now()
	rs := All(context.Background())
	t.Logf("All took %v", time.Since(start))
	if len(rs) != len(Names) {
		t.Fatalf("All returned %d results, want %d", len(rs), len(Names))
	}
	for i, r := range rs {
		if r.Name != Names[i] {
			t.Errorf("result %d is %q, want %q", i, r.Name, Names[i])
		}
		if !r.OK && r.Why == "" {
			t.Errorf("%s: not OK without Why", r.Name)
		}
	}
}

func TestKnown(t *testing.T) {
	for _, n := range Names {
		if !Known(n) {
			t.Errorf("Known(%q) = false", n)
		}
	}
	for _, n := range []string{"", "all", "Root", "cgroup"} {
		if Known(n) {
			t.Errorf("Known(%q) = true", n)
		}
	}
}

// openKVM opens /dev/kvm and creates a VM, or skips.
func openKVM(t *testing.T) (kvm, vm int) {
	t.Helper()
	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		skipOrFail(t, "kvm", "cannot open /dev/kvm: %v", err)
	}
	if err != nil {
		t.Fatalf("open /dev/kvm: %v", err)
	}
	t.Cleanup(func() { unix.Close(kvm) })
	vm, err = unix.IoctlRetInt(kvm, kvmCreateVM)
	if err != nil {
		skipOrFail(t, "kvm", "KVM_CREATE_VM: %v", err)
	}
	t.Cleanup(func() { unix.Close(vm) })
	return kvm, vm
}

func TestKVMGuestHalts(t *testing.T) {
	kvm, vm := openKVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	what, err := kvmRunGuest(ctx, kvm, vm, nil)
	if err != nil {
		t.Fatalf("kvmRunGuest(hlt): %v", err)
	}
	if what == "" {
		t.Fatal("kvmRunGuest(hlt) said nothing about what ran")
	}
}
