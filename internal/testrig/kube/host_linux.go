package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// ip runs the ip command.
func ip(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// linkExists says whether a network interface exists.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// setupNodeLink makes the bridge that carries the node's address: the
// kubelet serves on it (it refuses a loopback address) and nothing else
// is attached to it.
func setupNodeLink(ctx context.Context) error {
	if err := ip(ctx, "link", "add", nodeLink, "type", "bridge"); err != nil {
		return fmt.Errorf("make the node's link: %w", err)
	}
	if err := ip(ctx, "addr", "add", nodeIP+"/32", "dev", nodeLink); err != nil {
		return fmt.Errorf("give the node its address: %w", err)
	}
	if err := ip(ctx, "link", "set", nodeLink, "up"); err != nil {
		return fmt.Errorf("bring the node's link up: %w", err)
	}
	return nil
}

// deleteLinks removes the rig's links; the Pods' veths go with their
// network namespaces.
func deleteLinks(ctx context.Context) error {
	var errs []error
	for _, l := range []string{podLink, nodeLink} {
		if !linkExists(l) {
			continue
		}
		if err := ip(ctx, "link", "del", l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cgroupMounts lists the mount points of the cgroup file systems, v1 and
// v2.
func cgroupMounts() ([]string, error) {
	mounts, err := mountinfo.Read()
	var syntax *mountinfo.SyntaxError
	if err != nil && !errors.As(err, &syntax) {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var points []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			points = append(points, m.Point)
		}
	}
	return points, nil
}

// setupCgroups makes the rig's cgroup in every hierarchy, for the
// kubelet's cgroupRoot (it must exist). In the cpuset hierarchy of cgroup
// v1 a new cgroup has no CPUs or memory nodes until given its parent's.
func setupCgroups() error {
	points, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, p := range points {
		dir := filepath.Join(p, cgroupName)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// removeCgroups removes the rig's cgroup and everything below it in every
// hierarchy, deepest first, waiting up to timeout for exiting processes to
// leave them.
func removeCgroups(ctx context.Context, timeout time.Duration) error {
	points, err := cgroupMounts()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, p := range points {
			root := filepath.Join(p, cgroupName)
			var dirs []string
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			slices.Reverse(dirs)
			for _, d := range dirs {
				if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
					left = append(left, fmt.Sprintf("%s (%v%s)", d, err, cgroupProcs(d)))
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cannot remove cgroups: %s", strings.Join(left, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupProcs names the processes left in a cgroup, for an error.
func cgroupProcs(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	var procs []string
	for _, pid := range strings.Fields(string(b)) {
		procs = append(procs, pid+" "+procDescribe(pid))
	}
	return "; holds " + strings.Join(procs, ", ")
}

// procDescribe is a process's command and state, for messages.
func procDescribe(pid string) string {
	cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	name := strings.Join(strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " ")), " ")
	if len(name) > 120 {
		name = name[:120] + "…"
	}
	if name == "" {
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		name = "[" + strings.TrimSpace(string(comm)) + "]"
	}
	return name + " (" + procState(pid) + ")"
}

// procState is the one-letter state of /proc/<pid>/stat ("Z" for a zombie).
func procState(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "gone"
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return "?"
	}
	return string(b[i+2])
}

// rigProcesses lists the live processes that belong to the rig: those
// whose command line names a path under its run directory (the
// components, containerd's shims, runc and runsc), and those in the rig's
// cgroups (the Pods' processes). Zombies are left out: they are dead
// already.
func rigProcesses(run string) []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		s := strconv.Itoa(pid)
		if st := procState(s); st == "Z" || st == "X" || st == "gone" {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + s + "/cmdline"); err == nil && bytes.Contains(cmd, []byte(run+"/")) {
			pids = append(pids, pid)
			continue
		}
		if cg, err := os.ReadFile("/proc/" + s + "/cgroup"); err == nil && inRigCgroup(cg) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// inRigCgroup says whether a /proc/<pid>/cgroup file places the process
// in the rig's cgroup.
func inRigCgroup(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == "/"+cgroupName || strings.HasPrefix(parts[2], "/"+cgroupName+"/")) {
			return true
		}
	}
	return false
}

// killRigProcesses kills every process of the rig and waits until none is
// left alive.
func killRigProcesses(ctx context.Context, run string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids := rigProcesses(run)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var left []string
			for _, p := range pids {
				left = append(left, strconv.Itoa(p)+" "+procDescribe(strconv.Itoa(p)))
			}
			return fmt.Errorf("processes of the rig survive SIGKILL: %s", strings.Join(left, "; "))
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sharedBind makes dir a shared mount point, so that mounts the kubelet
// makes below it in its own mount namespace appear in this one, where
// containerd looks for them.
func sharedBind(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// kubeletTunables are the kernel tunables the kubelet sets when they
// differ (pkg/kubelet/cm setupKernelTunables), with the values it wants.
var kubeletTunables = []struct {
	path, want string
}{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// tunableOverlay writes, for each tunable whose host value differs from
// the kubelet's, a file with the kubelet's value into dir, and returns the
// shell commands that bind those files over /proc/sys in the kubelet's
// mount namespace. There the kubelet reads what it wants and writes
// nothing; the host keeps its values.
func tunableOverlay(dir string) ([]string, error) {
	var cmds []string
	for _, t := range kubeletTunables {
		proc := "/proc/sys/" + t.path
		have, err := os.ReadFile(proc)
		if err != nil || strings.TrimSpace(string(have)) == t.want {
			continue
		}
		file := filepath.Join(dir, strings.ReplaceAll(t.path, "/", "."))
		if err := os.WriteFile(file, []byte(t.want+"\n"), 0o444); err != nil {
			return nil, fmt.Errorf("write the kubelet's view of %s: %w", proc, err)
		}
		cmds = append(cmds, "mount --bind "+shellQuote(file)+" "+proc)
	}
	return cmds, nil
}

// readTunables reads the host's values of the kubelet's tunables.
func readTunables() map[string]string {
	m := map[string]string{}
	for _, t := range kubeletTunables {
		b, err := os.ReadFile("/proc/sys/" + t.path)
		if err == nil {
			m[t.path] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// foreignMounts lists the mounts of this namespace, deepest first, that a
// process which needs only the paths in need (and /proc, /sys, /dev) can
// do without. A new mount namespace copies every mount of its parent and
// keeps them alive as long as it lives: other programs' mounts (their
// sandboxes' tmpfs, network namespaces) must not stay pinned by the
// kubelet's copy after they unmount them.
func foreignMounts(need []string) ([]string, error) {
	all, err := testrig.MountsUnder("/")
	if err != nil {
		return nil, err
	}
	return foreignOf(all, need), nil
}

// foreignOf picks from mount points those foreignMounts leaves out.
func foreignOf(all, need []string) []string {
	var out []string
	for _, m := range all {
		if m == "/" || underAny(m, "/proc", "/sys", "/dev") {
			continue
		}
		keep := false
		for _, n := range need {
			// An ancestor of a needed path carries it; a mount below a
			// needed directory is part of it.
			if underAny(n, m) || underAny(m, n) {
				keep = true
				break
			}
		}
		if !keep {
			out = append(out, m)
		}
	}
	return out
}

// underAny says whether path is one of dirs or below one.
func underAny(path string, dirs ...string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// fixedHostPaths are the directories the components make outside the
// rig's directory whatever their configuration, shallowest first, with the
// files they put in them: the kubelet's device plugin socket and container
// log links, and gVisor's shim sockets (removeShimSockets).
var fixedHostPaths = []struct {
	dir   string
	files []string
}{
	{"/var/lib/kubelet", nil},
	{"/var/lib/kubelet/device-plugins", []string{"kubelet.sock", "kubelet_internal_checkpoint", "DEPRECATION"}},
	{"/var/log/containers", nil},
	{"/run/containerd", nil},
	{shimSocketDir, nil},
}

// shimSocketDir is where gVisor's shim puts its socket, whatever
// containerd's shim socket_dir says.
const shimSocketDir = "/run/containerd/s"

// recordHostPaths writes to record which of fixedHostPaths do not exist
// yet: those the components are about to make, which cleanup removes. The
// record outlives a crash.
func recordHostPaths(record string) error {
	var missing []string
	for _, p := range fixedHostPaths {
		if _, err := os.Lstat(p.dir); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p.dir)
		}
	}
	if err := os.WriteFile(record, []byte(strings.Join(missing, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("record the components' host directories: %w", err)
	}
	return nil
}

// removeHostPaths removes the directories record lists, deepest first,
// with only the files the components put in them: a directory that holds
// anything else is someone else's now and stays. In a shim socket
// directory the rig made, a socket no process listens on is a dead shim's
// and goes too.
func removeHostPaths(record string) {
	b, err := os.ReadFile(record)
	if err != nil {
		return
	}
	made := strings.Fields(string(b))
	if slices.Contains(made, shimSocketDir) {
		live := liveUnixSockets()
		entries, _ := os.ReadDir(shimSocketDir)
		for _, e := range entries {
			p := filepath.Join(shimSocketDir, e.Name())
			if e.Type()&fs.ModeSocket != 0 && !live[p] {
				_ = os.Remove(p)
			}
		}
	}
	for i := len(fixedHostPaths) - 1; i >= 0; i-- {
		p := fixedHostPaths[i]
		if !slices.Contains(made, p.dir) {
			continue
		}
		for _, f := range p.files {
			_ = os.Remove(filepath.Join(p.dir, f))
		}
		_ = unix.Rmdir(p.dir)
	}
	_ = os.Remove(record)
}

// removeShimSockets removes the sockets of the shims of containerd's tasks
// under stateDir from shimSocketDir. A shim names its socket by the sha256
// of containerd's address, the namespace and the task (containerd's
// pkg/shim SocketAddress) and removes it when it exits cleanly; a killed
// one leaves it.
func removeShimSockets(stateDir, address string) {
	tasks := filepath.Join(stateDir, "io.containerd.runtime.v2.task")
	namespaces, _ := os.ReadDir(tasks)
	for _, ns := range namespaces {
		ids, _ := os.ReadDir(filepath.Join(tasks, ns.Name()))
		for _, id := range ids {
			for _, suffix := range []string{"", "/debug"} {
				sum := sha256.Sum256([]byte(filepath.Join(address, ns.Name(), id.Name()) + suffix))
				_ = os.Remove(filepath.Join(shimSocketDir, hex.EncodeToString(sum[:])))
			}
		}
	}
}

// liveUnixSockets lists the paths of the unix sockets bound in this
// network namespace (/proc/net/unix).
func liveUnixSockets() map[string]bool {
	live := map[string]bool{}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return live
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && strings.HasPrefix(f[7], "/") {
			live[f[7]] = true
		}
	}
	return live
}

// hasCapability says whether this process has capability c in its
// effective set.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<c) != 0
		}
	}
	return false
}

// containerLogLinks is where the kubelet links each container's log,
// whatever its podLogsDir.
const containerLogLinks = "/var/log/containers"

// removeContainerLogLinks removes the links the kubelet made to logs under
// podLogs.
func removeContainerLogLinks(podLogs string) {
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		target, err := os.Readlink(p)
		if err == nil && strings.HasPrefix(target, podLogs+"/") {
			_ = os.Remove(p)
		}
	}
}
