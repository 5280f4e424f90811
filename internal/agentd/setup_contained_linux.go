package agentd

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/rootfs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// cgroupStaging is where setupContained mounts gVisor's cgroup file system for
// a moment, before any command runs: long enough to open it.
const cgroupStaging = "/tmp/.cgroup"

// setupContained finishes a sandbox whose root, mounts, namespaces, hostname
// and loopback a runtime built (runsc from the OCI bundle, a container
// engine). What is left is inside
// gVisor's own kernel:
//
//   - the agent's binary and /sys (which runsc always mounts) are unmounted
//     and their mount points removed, so no command sees them;
//   - gVisor's cgroup v2 file system gives every exec its own group below a
//     "workload" group that holds the pids limit, as cgroups do on the host
//     in the native driver; the agent sits in a group of its own beside it;
//   - commands are chrooted into a bind of the whole tree, so that gVisor
//     refuses them user namespaces (see chrootTarget).
//
// Without gVisor's cgroup v2 file system (runsc older than 2026, or one
// started without --in-sandbox-cgroup=v2) the agent falls back to
// RLIMIT_NPROC for the pids limit and to process groups for kills.
// It returns a descriptor of the directory commands are chrooted into, or 0
// for none.
func setupContained(cfg *agent.Config) (workloadRoot int, err error) {
	g := cfg.Contained
	if g.ImageEnv {
		takeImageEnv(cfg)
	}
	var remove []string
	if g.AgentMount != "" {
		if err := unix.Unmount(g.AgentMount, unix.MNT_DETACH); err != nil {
			return 0, fmt.Errorf("unmount the agent's binary: %w", err)
		}
		remove = append(remove, g.AgentMount)
	}
	for _, m := range g.Unmount {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return 0, fmt.Errorf("unmount %s: %w", m, err)
		}
		remove = append(remove, m)
	}
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err == nil {
		remove = append(remove, "/sys")
	} else if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("unmount /sys: %w", err)
	}
	if err := removeMountPoints(remove); err != nil {
		return 0, err
	}
	if err := pruneDev(); err != nil {
		return 0, err
	}
	if err := makeHome(g); err != nil {
		return 0, err
	}
	if g.OwnWorkspace {
		if err := unix.Chown(sandbox.Workspace, cfg.UID, cfg.GID); err != nil {
			return 0, fmt.Errorf("give %s to the workload: %w", sandbox.Workspace, err)
		}
		if err := unix.Chmod(sandbox.Workspace, 0o755); err != nil {
			return 0, fmt.Errorf("give %s to the workload: %w", sandbox.Workspace, err)
		}
	}
	// Before the commands' chroot copies the tree, and while the root may
	// still be writable.
	if err := bindHome("/", cfg.Home); err != nil {
		return 0, err
	}
	if g.ReadOnlyRoot {
		if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return 0, fmt.Errorf("make the root read-only: %w", err)
		}
	}
	if err := nosuidAll(); err != nil {
		return 0, err
	}
	// The engine's /etc files (its resolver, the container's addresses)
	// go under every runtime: a kernel of the runtime's own (gVisor) shows
	// them as the engine bound them too.
	if err := ownEtc(cfg); err != nil {
		return 0, err
	}
	if err := ownIdentity(cfg); err != nil {
		return 0, err
	}
	if g.MaskProc {
		if err := maskProc(g.Home); err != nil {
			return 0, err
		}
		if err := limitPTYs(); err != nil {
			return 0, err
		}
	}
	dir, err := innerCgroups(g.Pids)
	if err != nil && g.CgroupV1 {
		cg, tasks, err1 := innerCgroupsV1(g.Pids)
		if err1 == nil {
			cfg.Cgroup, cfg.AgentTasks = cg, tasks
			if g.AgentMount != "" {
				_ = removeMountPoints([]string{path.Dir(g.AgentMount)})
			}
			return 0, nil
		}
		err = errors.Join(err, err1)
	}
	if err != nil {
		// No cgroups inside: the process limit per uid stands in for them,
		// unless the uid is shared with other sandboxes (then the
		// runtime's own pids limit holds). Without them the agent forks
		// with clone, and the seccomp filter refuses clone3 and so every
		// new user namespace; no chroot is needed.
		if g.SharedUIDs {
			fmt.Fprintf(os.Stderr, "airlock-agent: no cgroups inside, the runtime's pids limit holds: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "airlock-agent: no cgroups inside, falling back to RLIMIT_NPROC: %v\n", err)
			cfg.Pids = g.Pids
		}
		cfg.Skip = append(cfg.Skip, sandbox.LayerCgroups)
		if g.AgentMount != "" {
			_ = removeMountPoints([]string{path.Dir(g.AgentMount)})
		}
		return 0, nil
	}
	cfg.Cgroup = agent.CgroupConfig{V2: true, FDs: []int{dir}, Controllers: [][]string{cgroup.V2Controllers}}
	switch {
	case g.ChrootDir != "":
		if err := os.Mkdir(g.ChrootDir, 0o700); err != nil {
			return 0, fmt.Errorf("make the commands' root: %w", err)
		}
		return chrootTarget(g.ChrootDir)
	case g.AgentMount != "":
		return chrootTarget(path.Dir(g.AgentMount))
	}
	return 0, nil
}

// chrootTarget binds the whole tree at dir, which it then denies to
// everybody but root, and returns a descriptor of it: the root commands are
// chrooted into.
//
// The tree is the same (the same file systems, mounted the same), but a
// chrooted process cannot make a user namespace (clone(2): EPERM), and
// that is the point. Inside gVisor the agent forks commands with clone3
// (CLONE_INTO_CGROUP puts them in their exec's cgroup), so the seccomp
// filter must allow clone3, whose flags it cannot see; and gVisor has no
// user.max_user_namespaces to set to 0 as the native agent does. The
// chroot refuses CLONE_NEWUSER instead, in gVisor's kernel itself.
// Within the bound tree dir is an empty directory again: commands see it
// as such.
func chrootTarget(dir string) (int, error) {
	if err := os.Chmod(dir, 0o700); err != nil {
		return -1, fmt.Errorf("close the commands' root to others: %w", err)
	}
	if err := unix.Mount("/", dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return -1, fmt.Errorf("bind the commands' root: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the commands' root: %w", err)
	}
	return fd, nil
}

// removeMountPoints removes what was left of mounts: the files and
// directories gVisor made as their mount points. Those on the read-only
// root (gVisor makes up /sys's in memory) need the root writable for a
// moment, while only the agent runs. A name that is really in the root's
// directory on the host stays: the runtime keeps the host's directory
// read-only whatever gVisor is told.
func removeMountPoints(names []string) error {
	var readOnly []string
	for _, name := range names {
		if err := removeName(name); errors.Is(err, unix.EROFS) {
			readOnly = append(readOnly, name)
		}
	}
	if len(readOnly) == 0 {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND, ""); err != nil {
		// Old gVisor (2022) cannot remount the root: the empty mount
		// points stay visible, nothing more.
		fmt.Fprintf(os.Stderr, "airlock-agent: cannot remove the mount points %v: make the root writable: %v\n", readOnly, err)
		return nil
	}
	for _, name := range readOnly {
		_ = removeName(name)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the root read-only again: %w", err)
	}
	return nil
}

// extraDevices are what a runtime's /dev may hold beyond what the native
// driver's has: gVisor adds /dev/fuse and /dev/net/tun (its own emulated
// devices: no way to the host, but kernel attack surface inside the
// Sentry) and /dev/char, links to them by number. A command needs none of
// them.
var extraDevices = []string{"/dev/fuse", "/dev/net/tun", "/dev/net", "/dev/char", "/dev/mqueue", "/dev/console"}

// pruneDev removes the extra devices from /dev, a file system of the
// sandbox's own (a tmpfs in gVisor).
func pruneDev() error {
	for _, name := range extraDevices {
		// A container engine mounts some (its /dev/mqueue).
		if err := unix.Unmount(name, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", name, err)
		}
		if err := os.RemoveAll(name); err != nil {
			return fmt.Errorf("remove %s from /dev: %w", name, err)
		}
	}
	return nil
}

// removeName removes the file or empty directory name.
func removeName(name string) error {
	err := unix.Rmdir(name)
	if errors.Is(err, unix.ENOTDIR) {
		err = unix.Unlink(name)
	}
	return err
}

// innerCgroups mounts gVisor's cgroup v2 file system for a moment, moves the
// agent into a group of its own, makes the workload's group with the pids
// limit, and returns a descriptor of the workload's group, which outlives
// the mount.
func innerCgroups(pids int) (int, error) {
	if err := os.Mkdir(cgroupStaging, 0o700); err != nil {
		return -1, fmt.Errorf("make the cgroup mount point: %w", err)
	}
	defer os.Remove(cgroupStaging)
	if err := unix.Mount("none", cgroupStaging, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return -1, fmt.Errorf("mount gVisor's cgroup file system: %w", err)
	}
	defer unix.Unmount(cgroupStaging, unix.MNT_DETACH)
	root := cgroupStaging
	// Nothing is made unless every controller is there: the file system
	// of a hybrid host's unified hierarchy holds none, and its root may be
	// the host's own (a container in the host's cgroup namespace).
	b, err := os.ReadFile(root + "/cgroup.controllers")
	if err != nil {
		return -1, fmt.Errorf("read the cgroup controllers: %w", err)
	}
	for _, c := range cgroup.V2Controllers {
		if !slices.Contains(strings.Fields(string(b)), c) {
			return -1, fmt.Errorf("the cgroup file system inside has no %s controller (it has %q)", c, strings.TrimSpace(string(b)))
		}
	}
	agent, workload := root+"/agent", root+"/workload"
	for _, d := range []string{agent, workload} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return -1, fmt.Errorf("make cgroup %s: %w", d, err)
		}
	}
	// A group with processes in it cannot pass controllers down: the agent
	// leaves the root first.
	if err := os.WriteFile(agent+"/cgroup.procs", []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return -1, fmt.Errorf("move the agent into its cgroup: %w", err)
	}
	if err := cgroup.EnableControllers(root); err != nil {
		return -1, err
	}
	if err := cgroup.EnableControllers(workload); err != nil {
		return -1, err
	}
	if pids > 0 {
		if err := os.WriteFile(workload+"/pids.max", []byte(strconv.Itoa(pids)), 0); err != nil {
			return -1, fmt.Errorf("set the workload's pids limit: %w", err)
		}
	}
	fd, err := unix.Open(workload, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the workload's cgroup: %w", err)
	}
	return fd, nil
}

// innerCgroupsV1 mounts the runtime's cgroup v1 hierarchies for a moment
// and makes the workload's group with the pids limit in each, below the
// agent's own group (v1 lets a group hold processes and children alike).
// In a cgroup namespace of the container's own, each hierarchy shows the
// container's group as its root, so nothing above it is within reach; the
// agent refuses to go on when its groups are not the namespace's roots.
// It returns the workload's group (a directory descriptor per hierarchy,
// which outlives the mounts) and descriptors of the "tasks" files of the
// agent's group, through which a spawner thread comes back after a fork.
func innerCgroupsV1(pids int) (agent.CgroupConfig, []int, error) {
	var cg agent.CgroupConfig
	hiers, err := ownV1Hierarchies()
	if err != nil {
		return cg, nil, err
	}
	if err := os.Mkdir(cgroupStaging, 0o700); err != nil {
		return cg, nil, fmt.Errorf("make the cgroup mount point: %w", err)
	}
	var mounted []string
	defer func() {
		for _, m := range mounted {
			_ = unix.Unmount(m, unix.MNT_DETACH)
			_ = os.Remove(m)
		}
		_ = os.Remove(cgroupStaging)
	}()
	var fds, tasks []int
	fail := func(err error) (agent.CgroupConfig, []int, error) {
		for _, fd := range append(fds, tasks...) {
			_ = unix.Close(fd)
		}
		return agent.CgroupConfig{}, nil, err
	}
	for i, ctrls := range hiers {
		dir := cgroupStaging + "/" + strconv.Itoa(i)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fail(fmt.Errorf("make the cgroup mount point: %w", err))
		}
		if err := unix.Mount("cgroup", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, strings.Join(ctrls, ",")); err != nil {
			_ = os.Remove(dir)
			return fail(fmt.Errorf("mount the %s cgroup hierarchy: %w", strings.Join(ctrls, ","), err))
		}
		mounted = append(mounted, dir)
		workload := dir + "/workload"
		if err := os.Mkdir(workload, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fail(fmt.Errorf("make cgroup %s: %w", workload, err))
		}
		if pids > 0 && slices.Contains(ctrls, "pids") {
			if err := os.WriteFile(workload+"/pids.max", []byte(strconv.Itoa(pids)), 0); err != nil {
				return fail(fmt.Errorf("set the workload's pids limit: %w", err))
			}
		}
		fd, err := unix.Open(workload, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open the workload's cgroup: %w", err))
		}
		fds = append(fds, fd)
		t, err := unix.Open(dir+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("open the agent's cgroup: %w", err))
		}
		tasks = append(tasks, t)
	}
	return agent.CgroupConfig{FDs: fds, Controllers: hiers}, tasks, nil
}

// ownV1Hierarchies lists the cgroup v1 hierarchies that hold the controllers
// a sandbox needs, each as the controllers mounted together there, from
// /proc/self/cgroup. Every one must show the agent at its root: the
// container has a cgroup namespace of its own.
func ownV1Hierarchies() ([][]string, error) {
	ms, err := cgroup.Of(0)
	if err != nil {
		return nil, fmt.Errorf("read the agent's cgroups: %w", err)
	}
	var out [][]string
	for _, want := range cgroup.V1Controllers {
		found := false
		for _, m := range ms {
			if m.V2 || !m.Has(want) {
				continue
			}
			if m.Path != "/" {
				return nil, fmt.Errorf("the %s cgroup is %s, not the root of a cgroup namespace of the container's own", want, m.Path)
			}
			if !slices.ContainsFunc(out, func(c []string) bool { return slices.Equal(c, m.Controllers) }) {
				out = append(out, m.Controllers)
			}
			found = true
		}
		if !found {
			return nil, fmt.Errorf("no cgroup v1 %s controller", want)
		}
	}
	return out, nil
}

// nosuidAll makes every mount nosuid that is not: a runtime leaves some as
// they come (a container engine's /etc/hosts and volumes). Other flags
// stay as they are.
func nosuidAll() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || slices.Contains(strings.Split(f[5], ","), "nosuid") {
			continue
		}
		target := unescapeOctal(f[4])
		err := unix.MountSetattr(unix.AT_FDCWD, target, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID})
		if errors.Is(err, unix.ENOSYS) {
			err = remountNosuid(target)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("make %s nosuid: %w", target, err)
		}
	}
	return nil
}

// remountNosuid is nosuidAll before Linux 5.12: a bind remount that keeps
// the flags the mount has.
func remountNosuid(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID)
	for _, f := range [][2]uintptr{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	return unix.Mount("", target, "", flags, "")
}

// unescapeOctal undoes mountinfo's octal escapes (\040 for a space).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// makeHome makes the agent's own directory, only root may enter, and moves
// the agent's volume into it (see agent.ContainedConfig.Home).
func makeHome(g *agent.ContainedConfig) error {
	if g.Home == "" {
		return nil
	}
	if err := os.Mkdir(g.Home, 0o700); err != nil {
		return fmt.Errorf("make the agent's directory: %w", err)
	}
	if g.AgentVolume == "" {
		return nil
	}
	bin := g.Home + "/bin"
	if err := os.Mkdir(bin, 0o700); err != nil {
		return fmt.Errorf("make the agent's directory: %w", err)
	}
	if err := unix.Mount(g.AgentVolume, bin, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the agent's volume: %w", err)
	}
	if err := removeName(g.AgentVolume); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove the agent's volume's mount point: %w", err)
	}
	return nil
}

// ownEtc replaces the files of /etc that the runtime bound from its own
// data directory (sandbox.EngineEtc: a container engine's resolv.conf,
// hosts and hostname) with what the native driver writes in a composed
// root: no resolver of the host's, no address of the container's, and no
// engine path in the mount table. The engine's mounts are taken away (a
// bind over them would leave their lines in /proc/self/mountinfo), and
// each mount point gets a read-only bind of a file of the sandbox's own,
// held by a tiny tmpfs mounted in the agent's home for a moment.
func ownEtc(cfg *agent.Config) error {
	mounted, err := mountPoints()
	if err != nil {
		return err
	}
	content := rootfs.EtcFiles(cfg.UID, cfg.GID, cfg.Hostname)
	var targets []string
	for _, p := range sandbox.EngineEtc {
		if mounted[p] {
			targets = append(targets, p)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	home := cfg.Contained.Home
	if home == "" {
		home = "/tmp"
	}
	dir := home + "/.etc"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("make the sandbox's own /etc files: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=8,mode=0755"); err != nil {
		return fmt.Errorf("make the sandbox's own /etc files: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	for _, p := range targets {
		src := dir + "/" + path.Base(p)
		if err := os.WriteFile(src, []byte(content[path.Base(p)]), 0o644); err != nil {
			return fmt.Errorf("write the sandbox's own %s: %w", p, err)
		}
		// A runtime may stack more than one mount there.
		for mounted := true; mounted; {
			err := unix.Unmount(p, unix.MNT_DETACH)
			switch {
			case errors.Is(err, unix.EINVAL):
				mounted = false
			case err != nil:
				return fmt.Errorf("unmount the runtime's %s: %w", p, err)
			}
		}
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the sandbox's own %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("make the sandbox's own %s read-only: %w", p, err)
		}
	}
	return nil
}

// limitPTYs bounds the terminals of the runtime's devpts instance at
// /dev/pts to maxPTYs, as the native agent mounts its own: every devpts
// instance but the host's shares kernel.pty.max less kernel.pty.reserve,
// and a runtime mounts its instance without a bound. A remount takes every
// option anew, so the instance's own (its mode, group, ptmx mode) are
// given again. Without a devpts instance at /dev/pts there is nothing to
// bound.
func limitPTYs() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 || unescapeOctal(f[4]) != "/dev/pts" || g[0] != "devpts" {
			continue
		}
		var opts []string
		for _, o := range strings.Split(g[2], ",") {
			if k, _, _ := strings.Cut(o, "="); k == "gid" || k == "uid" || k == "mode" || k == "ptmxmode" {
				opts = append(opts, o)
			}
		}
		opts = append(opts, "max="+strconv.Itoa(maxPTYs))
		flags := uintptr(unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NOEXEC)
		if slices.Contains(strings.Split(f[5], ","), "ro") {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("devpts", "/dev/pts", "devpts", flags, strings.Join(opts, ",")); err != nil {
			return fmt.Errorf("bound the terminals of /dev/pts: %w", err)
		}
	}
	return nil
}

// mountPoints are the mount points of the agent's mount namespace.
func mountPoints() (map[string]bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the mounts: %w", err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			out[unescapeOctal(f[4])] = true
		}
	}
	return out, nil
}

// maskProc masks what of the host kernel's /proc tells the host apart (see
// maskedProc) and covers its boot id with one of the sandbox's own, made
// in the agent's directory home for a moment.
func maskProc(home string) error {
	for _, name := range maskedProc {
		p := "/proc/" + name
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", name, err)
		}
	}
	if home == "" {
		home = "/tmp"
	}
	return bindBootID(home+"/.boot", sandbox.BootIDFile)
}
