package hostcap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// probes maps each of Names to its probe.
var probes = map[string]probe{
	"root":     {run: probeRoot},
	"userns":   {run: probeUserns},
	"cgroupv1": {run: probeCgroupV1},
	"cgroupv2": {run: probeCgroupV2},
	"seccomp":  {run: probeSeccomp},
	"landlock": {run: probeLandlock},
	"runsc":    {run: probeRunsc, timeout: 50 * time.Second},
	"kvm":      {run: probeKVM},
	"qemu":     {run: probeQEMU, timeout: 20 * time.Second},
	"bwrap":    {run: probeBwrap, timeout: 15 * time.Second},
	"overlay":  {run: probeOverlay},
}

// ok is a working capability.
func ok(detail string) Result { return Result{OK: true, Detail: detail} }

// fail is a missing capability: why it is missing and how to get it.
func fail(why, fix string) Result { return Result{Why: why, Fix: fix} }

// isRoot says whether this process runs with effective uid 0.
func isRoot() bool { return os.Geteuid() == 0 }

// notRoot is appended to a Why when a step failed that needs root and the
// process is not root.
func notRoot() string {
	if isRoot() {
		return ""
	}
	return fmt.Sprintf(" (needs root; running as uid %d)", os.Geteuid())
}

// rootFix is the fix for a step that needs root.
const rootFix = "run airlock as root (sudo airlock …)"

// readSysctl reads a sysctl such as "user.max_user_namespaces". The bool is
// false when the sysctl does not exist.
func readSysctl(name string) (string, bool) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// probeRoot checks that the effective uid is 0.
func probeRoot(context.Context) Result {
	if isRoot() {
		return ok("euid 0")
	}
	return fail(fmt.Sprintf("running as uid %d, not root", os.Geteuid()), rootFix)
}

// truePath finds a program that exits 0 at once.
func truePath() string {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("true"); err == nil {
		return p
	}
	return "/bin/true"
}

// probeUserns starts /bin/true in new user, pid, mount and network
// namespaces, mapped to the caller's uid, and reports the sysctls that
// govern user namespaces.
func probeUserns(ctx context.Context) Result {
	var notes []string
	maxNS, hasMax := readSysctl("user.max_user_namespaces")
	if hasMax {
		notes = append(notes, "user.max_user_namespaces="+maxNS)
	}
	aa, hasAA := readSysctl("kernel.apparmor_restrict_unprivileged_userns")
	if hasAA {
		notes = append(notes, "kernel.apparmor_restrict_unprivileged_userns="+aa)
	}
	clone, hasClone := readSysctl("kernel.unprivileged_userns_clone")
	if hasClone {
		notes = append(notes, "kernel.unprivileged_userns_clone="+clone)
	}
	detail := strings.Join(notes, ", ")

	cmd := exec.CommandContext(ctx, truePath())
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		// An unprivileged process may map its gid only with setgroups off.
		GidMappingsEnableSetgroups: false,
	}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err == nil {
		return ok(detail)
	}
	why := fmt.Sprintf("cannot start a process in new user, pid, mount and network namespaces: %v", err)
	if s := strings.TrimSpace(string(out)); s != "" {
		why += ": " + s
	}
	if detail != "" {
		why += " (" + detail + ")"
	}
	var fix string
	switch {
	case hasMax && maxNS == "0":
		fix = "sysctl -w user.max_user_namespaces=65536"
	case hasAA && aa == "1" && !isRoot():
		fix = "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or run airlock as root)"
	case hasClone && clone == "0" && !isRoot():
		fix = "sysctl -w kernel.unprivileged_userns_clone=1 (or run airlock as root)"
	default:
		fix = "use a kernel with CONFIG_USER_NS=y; inside a container, allow unshare/clone " +
			"(docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or --privileged)"
	}
	return fail(why, fix)
}

// probeSeccomp checks that the kernel has seccomp filters with
// SECCOMP_RET_KILL_PROCESS, without installing one.
func probeSeccomp(context.Context) Result {
	const fix = "use a kernel with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y (Linux ≥ 4.14)"
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return fail(fmt.Sprintf("prctl(PR_GET_SECCOMP): %v: the kernel has no seccomp", err), fix)
	}
	status, err := statusField("Seccomp")
	if err != nil {
		return fail(fmt.Sprintf("read seccomp mode: %v", err), fix)
	}
	if err := seccompActionAvail(unix.SECCOMP_RET_KILL_PROCESS); err != nil {
		return fail(fmt.Sprintf("seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_KILL_PROCESS): %v: "+
			"the kernel lacks seccomp filters or is older than 4.14", err), fix)
	}
	detail := "filters with SECCOMP_RET_KILL_PROCESS"
	if mode == unix.SECCOMP_MODE_FILTER {
		detail += "; this process is already filtered (mode " + status + "), new filters stack on it"
	}
	return ok(detail)
}

// statusField returns the value of a field of /proc/self/status.
func statusField(name string) (string, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/status: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := strings.Cut(sc.Text(), ":")
		if found && k == name {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no %s field in /proc/self/status", name)
}

// probeLandlock asks the kernel for its Landlock ABI version.
func probeLandlock(context.Context) Result {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == unix.ENOSYS:
		return fail("the kernel has no Landlock (landlock_create_ruleset: ENOSYS)",
			"use Linux ≥ 5.13 built with CONFIG_SECURITY_LANDLOCK=y")
	case errno == unix.EOPNOTSUPP:
		return fail("Landlock is built in but disabled at boot (landlock_create_ruleset: EOPNOTSUPP)",
			"add landlock to the lsm= kernel boot parameter, e.g. lsm=landlock,lockdown,yama,integrity,apparmor")
	case errno != 0:
		return fail(fmt.Sprintf("landlock_create_ruleset(LANDLOCK_CREATE_RULESET_VERSION): %v", errno),
			"use Linux ≥ 5.13 with Landlock enabled")
	case int(abi) < 1:
		return fail(fmt.Sprintf("Landlock reports ABI %d", int(abi)), "use Linux ≥ 5.13 with Landlock enabled")
	}
	return ok("ABI " + strconv.Itoa(int(abi)))
}
