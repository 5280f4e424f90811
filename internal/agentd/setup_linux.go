package agentd

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/rootfs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"golang.org/x/sys/unix"
)

// staging is where the new root is assembled before pivot_root. The mount
// namespace is the agent's own, so covering the host's /tmp here hides it
// from nobody but the sandbox.
const staging = "/tmp"

// maskedProc are covered so the workload cannot read them: the shared list
// of what a sandbox must not see (sandbox.MaskedProc).
var maskedProc = sandbox.MaskedProc

// readonlyProc are made read-only (as runc does): sysrq-trigger among
// them, since writing to /dev/null, which masks the others, succeeds.
var readonlyProc = []string{"bus", "fs", "irq", "sys", "sysrq-trigger"}

// enterAgentGroup moves every thread of the agent into its own cgroup
// through the tasks descriptors the host passed. Each thread writes "0"
// (itself): a process move would take the kernel's global cgroup lock and
// wait for an RCU grace period, milliseconds on every sandbox start. The
// descriptors stay open: a spawner thread comes back through them.
func enterAgentGroup(fds []int) error {
	if err := writeZero(fds, true); err != nil {
		return fmt.Errorf("enter the agent's cgroup: %w", err)
	}
	return nil
}

// writeZero writes "0" to each of fds, from every thread of the agent or
// from the calling thread only.
func writeZero(fds []int, allThreads bool) error {
	zero := []byte("0")
	for _, fd := range fds {
		var e syscall.Errno
		if allThreads {
			_, _, e = syscall.AllThreadsSyscall6(unix.SYS_PWRITE64, uintptr(fd), uintptrOf(&zero[0]), 1, 0, 0, 0)
		} else {
			_, _, e = syscall.Syscall6(unix.SYS_PWRITE64, uintptr(fd), uintptrOf(&zero[0]), 1, 0, 0, 0)
		}
		if e != 0 {
			return e
		}
	}
	return nil
}

// setup builds the sandbox from inside its new namespaces: a private mount
// tree, a composed read-only root with /proc, /dev, /tmp and /workspace,
// pivot_root into it, hostname and loopback. It runs once, single-threaded
// in spirit (nothing else runs yet), as uid 0 of the sandbox's user namespace.
func setup(cfg *agent.Config) error {
	// No process of the sandbox may make a user namespace of its own (the
	// seccomp filter also refuses it, where it can see the flags). The
	// limit is per user namespace, so this changes nothing on the host.
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
		return fmt.Errorf("forbid nested user namespaces: %w", err)
	}
	if err := limitInotify(); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount tree private: %w", err)
	}
	if cfg.Root != 0 {
		if err := attach(cfg.Root, staging); err != nil {
			return fmt.Errorf("attach the root file system: %w", err)
		}
		for _, d := range []string{"proc", "dev", "tmp", "workspace"} {
			if fi, err := os.Stat(filepath.Join(staging, d)); err != nil || !fi.IsDir() {
				return fmt.Errorf("the root file system has no /%s directory; create it (mkdir ROOT/%s)", d, d)
			}
		}
	} else if err := composeRoot(cfg); err != nil {
		return err
	}
	if err := mountSpecial(cfg); err != nil {
		return err
	}
	for _, m := range cfg.Mounts {
		if err := attachMount(m); err != nil {
			return err
		}
	}
	if err := bindHome(staging, cfg.Home); err != nil {
		return err
	}
	if err := pivot(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	return nil
}

// limitInotify gives the sandbox an inotify pool of its own size in its
// user namespace (see agent.InotifyInstances): without it every instance
// and watch of the sandbox counts only against the pool of the host user
// that owns the namespace, which the host shares.
func limitInotify() error {
	for _, l := range []struct {
		name string
		val  int
	}{
		{"max_inotify_instances", agent.InotifyInstances},
		{"max_inotify_watches", agent.InotifyWatches},
	} {
		if err := os.WriteFile("/proc/sys/user/"+l.name, []byte(strconv.Itoa(l.val)), 0); err != nil {
			return fmt.Errorf("limit the sandbox's inotify pool (user.%s): %w", l.name, err)
		}
	}
	return nil
}

func composeRoot(cfg *agent.Config) error {
	if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("mount the root tmpfs: %w", err)
	}
	for _, d := range rootfs.RootDirs {
		if err := os.Mkdir(filepath.Join(staging, d), 0o755); err != nil {
			return fmt.Errorf("make root directory /%s: %w", d, err)
		}
	}
	if err := bindRO("/usr", filepath.Join(staging, "usr")); err != nil {
		return err
	}
	for _, d := range rootfs.HiddenUsr {
		if err := hide(filepath.Join(staging, "usr", d), "/usr/"+d); err != nil {
			return err
		}
	}
	// Merged /usr: /bin, /lib… are symlinks into /usr; a split /usr gets binds.
	for _, d := range rootfs.UsrLinks {
		if err := mirror("/"+d, filepath.Join(staging, d)); err != nil {
			return err
		}
	}
	for _, name := range rootfs.EtcAllowlist {
		if err := mirror("/etc/"+name, filepath.Join(staging, "etc", name)); err != nil {
			return err
		}
	}
	for name, content := range rootfs.EtcFiles(cfg.UID, cfg.GID, cfg.Hostname) {
		if err := os.WriteFile(filepath.Join(staging, "etc", name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	return nil
}

// hide covers the directory dst (what is the sandbox's path), when there is
// one, with an empty read-only one.
func hide(dst, what string) error {
	if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
		return nil
	}
	flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("tmpfs", dst, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0755"); err != nil {
		return fmt.Errorf("hide %s: %w", what, err)
	}
	return nil
}

// mirror makes dst look like the host's src: a symlink is copied, a
// directory or file is bound read-only, a missing src is skipped.
func mirror(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look at host %s: %w", src, err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("read host symlink %s: %w", src, err)
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return fmt.Errorf("make %s: %w", dst, err)
		}
	case fi.Mode().IsRegular():
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return fmt.Errorf("make %s: %w", dst, err)
		}
	default:
		return nil
	}
	return bindRO(src, dst)
}

// bindRO binds src onto dst, read-only, nosuid and nodev, recursively.
func bindRO(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind host %s: %w", src, err)
	}
	return setReadOnly(dst, src)
}

// setReadOnly makes the mount at dst and everything below it read-only.
func setReadOnly(dst, what string) error {
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	err := unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, attr)
	if errors.Is(err, unix.ENOSYS) {
		err = remountRO(dst)
	}
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", what, err)
	}
	return nil
}

// remountRO is the pre-5.12 way: a bind remount that keeps the flags the
// kernel locked on the original mount.
func remountRO(dst string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range [][2]uintptr{
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	return unix.Mount("", dst, "", flags, "")
}

func mountSpecial(cfg *agent.Config) error {
	root := func(p string) string { return filepath.Join(staging, p) }
	// A fresh /proc for the sandbox's pid namespace. Commands see each
	// other (a later command can find and signal a background one) and the
	// agent's PID 1, but nothing of it beyond its name: the agent is not
	// dumpable and runs as another uid, so its environ, memory, fds and
	// exe refuse them. Landlock (one domain per command) hides nothing
	// here: hidepid would, and would hide a command's own background work.
	if err := unix.Mount("proc", root("proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, name := range maskedProc {
		p := root("proc/" + name)
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
	for _, name := range readonlyProc {
		p := root("proc/" + name)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc/%s: %w", name, err)
		}
		if err := setReadOnly(p, "/proc/"+name); err != nil {
			return err
		}
	}
	// A minimal /dev: the harmless character devices, bound from the host
	// (a user namespace cannot mknod), and the usual links.
	if err := unix.Mount("tmpfs", root("dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	// /dev/tty is every process's own controlling terminal: binding the
	// host's node shows nothing of the host.
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := root("dev/" + d)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return fmt.Errorf("make /dev/%s: %w", d, err)
		}
		if err := unix.Mount("/dev/"+d, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "core": "/proc/kcore",
	} {
		if err := os.Symlink(target, root("dev/"+name)); err != nil {
			return fmt.Errorf("link /dev/%s: %w", name, err)
		}
	}
	// The host's boot id would name this host in every sandbox it runs:
	// each sandbox gets one of its own.
	if err := bindBootID(root("dev/.boot"), root("proc/sys/kernel/random/boot_id")); err != nil {
		return err
	}
	if err := mountPTS(root("dev"), cfg); err != nil {
		return err
	}
	if err := os.Mkdir(root("dev/shm"), 0o1777); err != nil {
		return fmt.Errorf("make /dev/shm: %w", err)
	}
	if err := unix.Mount("tmpfs", root("dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size="+strconv.FormatInt(cfg.TmpBytes, 10)); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.Mount("", root("dev"), "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	// The writable places, each with its own size.
	if err := unix.Mount("tmpfs", root("tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+strconv.FormatInt(cfg.TmpBytes, 10)); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	ws := fmt.Sprintf("mode=0755,uid=%d,gid=%d,size=%d", cfg.UID, cfg.GID, cfg.DiskBytes)
	if err := unix.Mount("tmpfs", root("workspace"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, ws); err != nil {
		return fmt.Errorf("mount /workspace: %w", err)
	}
	return nil
}

// maxPTYs bounds the terminals a sandbox may have open at once. Every
// devpts instance but the host's shares kernel.pty.max less
// kernel.pty.reserve (3072 by default), so one sandbox must not take them
// all.
const maxPTYs = 64

// mountPTS gives the sandbox terminals of its own: a new devpts instance
// at /dev/pts (none of the host's terminals is in it), whose terminals
// belong to the workload's user, and /dev/ptmx pointing into it.
func mountPTS(dev string, cfg *agent.Config) error {
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return fmt.Errorf("make /dev/pts: %w", err)
	}
	opts := fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,uid=%d,gid=%d,max=%d", cfg.UID, cfg.GID, maxPTYs)
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := os.Symlink("pts/ptmx", filepath.Join(dev, "ptmx")); err != nil {
		return fmt.Errorf("link /dev/ptmx: %w", err)
	}
	return nil
}

// attach attaches the detached mount fd at dst.
func attach(fd int, dst string) error {
	return unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

func attachMount(m agent.MountConfig) error {
	dst := filepath.Join(staging, m.Target)
	var err error
	if m.Dir {
		err = os.MkdirAll(dst, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
		// A file that is there already is the mount point (the root may
		// be read-only); anything else in its place is not.
		fi, serr := os.Lstat(dst)
		switch {
		case serr != nil:
			err = os.WriteFile(dst, nil, 0o644)
		case !fi.Mode().IsRegular():
			err = fmt.Errorf("%s is not a file in the root", m.Target)
		}
	}
	if err != nil {
		return fmt.Errorf("make mount point %s: %w", m.Target, err)
	}
	if err := attach(m.FD, dst); err != nil {
		return fmt.Errorf("mount %s: %w", m.Target, err)
	}
	_ = unix.Close(m.FD)
	return nil
}

// pivot makes the staging tree the root and drops the host's tree from the
// namespace altogether.
func pivot() error {
	if err := unix.Chdir(staging); err != nil {
		return fmt.Errorf("enter new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// The composed root's own tmpfs becomes read-only; a given root already is.
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

// loopbackUp sets IFF_UP on lo, the only interface of the new network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// harden applies what protects the agent itself once the sandbox is built:
// not dumpable (the workload cannot ptrace it or read its memory or
// environment), rlimits its commands inherit, and only the capabilities it
// still needs.
func harden(cfg *agent.Config) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("make the agent non-dumpable: %w", err)
	}
	limits := []struct {
		res int
		val uint64
	}{
		{unix.RLIMIT_CORE, 0},
		{unix.RLIMIT_NOFILE, uint64(cfg.OpenFiles)},
		{unix.RLIMIT_FSIZE, uint64(cfg.FileSize)},
	}
	if cfg.Pids > 0 {
		// The agent's own threads run under another uid and do not count.
		limits = append(limits, struct {
			res int
			val uint64
		}{unix.RLIMIT_NPROC, uint64(cfg.Pids)})
	}
	for _, l := range limits {
		if l.val == 0 && l.res != unix.RLIMIT_CORE {
			continue
		}
		if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: l.val, Max: l.val}); err != nil {
			return fmt.Errorf("set rlimit %d: %w", l.res, err)
		}
	}
	keep := keptCaps
	if cfg.Contained != nil {
		// Inside gVisor each command is chrooted (see chrootTarget).
		keep = append(keep[:len(keep):len(keep)], unix.CAP_SYS_CHROOT)
		// The runtime started the agent with these and no others (the
		// bundle's spec says so); then there is nothing to drop, and no
		// reason to stop every thread to drop it.
		if holdsOnly(keep) {
			return nil
		}
	}
	return dropCaps(keep)
}

// holdsOnly says whether the calling thread's effective and permitted
// capabilities are among caps. The agent's threads all have the ones it
// was started with, until dropCaps.
func holdsOnly(caps []uintptr) bool {
	keep := uint64(0)
	for _, c := range caps {
		keep |= 1 << c
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	prm := uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	return eff&^keep == 0 && prm&^keep == 0
}

// keptCaps are what the agent needs after setup, all of them only inside
// the sandbox's own user namespace: start commands under another uid,
// signal them, drop the bounding set on their thread, give each command a
// cgroup namespace of its own (SYS_ADMIN), and act on files as the
// workload's uid.
var keptCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL, unix.CAP_SETPCAP, unix.CAP_SYS_ADMIN, unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER}

// dropCaps keeps only the capabilities caps in the effective and permitted
// sets of every thread. The bounding set is left alone: the agent never
// executes anything, and the thread a command is forked from drops all of
// it.
func dropCaps(caps []uintptr) error {
	keep := uint64(0)
	for _, c := range caps {
		keep |= 1 << c
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(keep), Permitted: uint32(keep)},
		{Effective: uint32(keep >> 32), Permitted: uint32(keep >> 32)},
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptrOf(&hdr), uintptrOf(&data[0]), 0); e != 0 {
		return fmt.Errorf("drop capabilities: %w", e)
	}
	return nil
}

// bindBootID covers the boot id file at p with a random one of the
// sandbox's own, read-only. The file lives on a tiny tmpfs of its own,
// mounted at the new directory dir for a moment and detached again (dir is
// removed): only the bind over p keeps it.
func bindBootID(dir, p string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	b[6] = b[6]&0x0f | 0x40 // a version 4 UUID, as the kernel's own
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("make the sandbox's boot id: %w", err)
	}
	defer os.Remove(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=4,mode=0755"); err != nil {
		return fmt.Errorf("make the sandbox's boot id: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	src := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(src, []byte(id), 0o444); err != nil {
		return fmt.Errorf("make the sandbox's boot id: %w", err)
	}
	if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("cover the host's boot id: %w", err)
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make the sandbox's boot id read-only: %w", err)
	}
	return nil
}

// awaitSandbox is the end of a template's setup (agent.Config.Template):
// it says the sandbox is built, waits for the sandbox's own config (from
// next: the config pipe, or standard input in stdio mode),
// and takes on what may differ from the template's: the host name, the
// sizes of /workspace, /tmp and /dev/shm, the environment, the file size
// limit, egress and (where it had none) the home; and it draws a new boot id. The guest's init sets the agent's rlimits (which
// harden lowered already) from outside.
func awaitSandbox(cfg *agent.Config, ready func() error, readNext func() (*agent.Config, error)) error {
	if err := ready(); err != nil {
		return fmt.Errorf("say the sandbox is built: %w", err)
	}
	nc, err := readNext()
	if err != nil {
		return fmt.Errorf("read the sandbox's config: %w", err)
	}
	next := *nc
	if next.Hostname != cfg.Hostname {
		if err := unix.Sethostname([]byte(next.Hostname)); err != nil {
			return fmt.Errorf("set hostname: %w", err)
		}
	}
	resize := func(dir string, flags uintptr, size int64) error {
		if err := unix.Mount("tmpfs", dir, "tmpfs", flags|unix.MS_REMOUNT, "size="+strconv.FormatInt(size, 10)); err != nil {
			return fmt.Errorf("size %s: %w", dir, err)
		}
		return nil
	}
	if next.DiskBytes != cfg.DiskBytes {
		if err := resize("/workspace", unix.MS_NOSUID|unix.MS_NODEV, next.DiskBytes); err != nil {
			return err
		}
	}
	if next.TmpBytes != cfg.TmpBytes {
		if err := resize("/tmp", unix.MS_NOSUID|unix.MS_NODEV, next.TmpBytes); err != nil {
			return err
		}
		if err := resize("/dev/shm", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, next.TmpBytes); err != nil {
			return err
		}
	}
	// A home is bound now where the template had none (a virtual
	// machine's template is every sandbox's). A sandbox built ahead in a
	// runtime chroots its commands into a copy of the tree made at setup,
	// which would not see it: its pool's shape names the home instead.
	if next.Home != cfg.Home {
		if cfg.Home != "" || cfg.Contained != nil {
			return fmt.Errorf("the sandbox's home %q differs from the one it was built with (%q): %w", next.Home, cfg.Home, sandbox.ErrInvalid)
		}
		if err := bindHome("/", next.Home); err != nil {
			return err
		}
	}
	// The boot id bound at setup is the template's, the same in every
	// sandbox built ahead from it (every virtual machine restored from one
	// snapshot): each gets one of its own. /tmp is the sandbox's, and no
	// command runs yet.
	// A runtime's own kernel (gVisor) has a boot id of the sandbox's
	// own already.
	const bootID = sandbox.BootIDFile
	if g := cfg.Contained; g == nil || g.MaskProc {
		if err := unix.Unmount(bootID, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("uncover the template's boot id: %w", err)
		}
		dir := "/tmp/.boot"
		if g != nil {
			dir = g.Home + "/.boot"
		}
		if err := bindBootID(dir, bootID); err != nil {
			return err
		}
	}
	cfg.Hostname, cfg.Env, cfg.Egress, cfg.Home = next.Hostname, next.Env, next.Egress, next.Home
	if cfg.Contained != nil && cfg.Contained.ImageEnv {
		takeImageEnv(cfg) // a Pod's image, under the claim's environment
	}
	cfg.DiskBytes, cfg.TmpBytes, cfg.FileSize, cfg.OpenFiles = next.DiskBytes, next.TmpBytes, next.FileSize, next.OpenFiles
	cfg.Template = false
	return nil
}

// warmUp runs argv once as a command would run, before a template's
// machine is saved: what it reads from the root disk (the program, its
// libraries) is then in the guest's page cache of the snapshot, and every
// sandbox restored from it starts its first such command sooner.
func warmUp(eng *engine, argv []string) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return
	}
	defer null.Close()
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer out.Close()
	p, err := eng.start(&agent.ExecStart{ID: "warm-up", Argv: argv}, null, out, out)
	if err != nil {
		return
	}
	select {
	case <-p.status:
	case <-time.After(30 * time.Second):
		eng.kill(p, sandbox.ReasonTimeout)
		<-p.status
	}
	eng.remove(p)
	eng.prepare()
}
