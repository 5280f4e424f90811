package agentd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The agent as PID 1 of a virtual machine (agent.GuestArg): the guest's
// init. It boots the guest, waits for the host's Config (the moment a
// snapshot is taken), gives the guest the sandbox's identity and starts the
// agent proper in new namespaces inside it, as the native driver does on a
// host. The guest's kernel is the sandbox's kernel, so the agent proper
// confines commands there exactly as it does on a host: uid 1000, no
// capabilities, no_new_privs, seccomp, Landlock, a cgroup each.

// Where the guest's init keeps things, in its own root (a tmpfs no command
// sees: the agent proper pivots away from it).
const (
	guestRootDisk = "/root"          // the sandbox's read-only root, mounted
	guestCgroup   = "/sys/fs/cgroup" // the guest's cgroup2
	guestRun      = "/run"           // a small tmpfs: the identity files
)

// guestMain runs the guest's init. It returns only on an error, which it
// has written to the console; the caller restarts the machine (which
// QEMU, run with -no-reboot, takes as the end).
//
// The agent proper is started, and builds the sandbox, before the guest
// says it is ready: a snapshot holds it built, waiting for the sandbox's
// own config (agent.Config.Template), so that a restored machine does
// only what makes it this sandbox.
func guestMain() error {
	port, err := bootGuest()
	if err != nil {
		return fmt.Errorf("boot the guest: %w", err)
	}
	a, err := startAgent(port)
	if err != nil {
		return err
	}
	if err := a.waitBuilt(); err != nil {
		return err
	}
	if _, err := port.WriteString(agent.GuestReady); err != nil {
		return fmt.Errorf("tell the host the guest is ready: %w", err)
	}
	// A snapshot of the machine is taken from here on.
	cfg, raw, err := readGuestConfig(port)
	if err != nil {
		return err
	}
	port.Close()
	if err := applyGuest(cfg.Guest); err != nil {
		return err
	}
	if err := a.claim(cfg, raw); err != nil {
		return err
	}
	go serveControl(a.ctl)
	err = a.cmd.Wait()
	fmt.Fprintf(os.Stderr, "airlock-guest: the agent ended: %v\n", err)
	return nil
}

// bootGuest mounts what the guest's init needs, loads the modules the
// initramfs holds, moves into a root of its own (the initramfs is freed),
// mounts the sandbox's root disk and the guest's cgroup2, and opens the
// host's port.
func bootGuest() (*os.File, error) {
	for _, m := range []struct{ src, dst, fs string }{
		{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return nil, err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	b, err := os.ReadFile(agent.GuestBootFile)
	if err != nil {
		return nil, fmt.Errorf("read the boot description: %w", err)
	}
	var boot agent.GuestBoot
	if err := json.Unmarshal(b, &boot); err != nil {
		return nil, fmt.Errorf("read the boot description: %w", err)
	}
	for _, m := range boot.Modules {
		if err := loadModule(filepath.Join(agent.GuestModulesDir, m)); err != nil {
			return nil, err
		}
	}
	if err := leaveInitramfs(); err != nil {
		return nil, err
	}
	if err := waitFor(boot.RootDevice, 20*time.Second); err != nil {
		return nil, err
	}
	if err := unix.Mount(boot.RootDevice, guestRootDisk, boot.RootFS, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return nil, fmt.Errorf("mount the root file system %s: %w", boot.RootDevice, err)
	}
	if err := unix.Mount("cgroup2", guestCgroup, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount the guest's cgroup2: %w", err)
	}
	for _, g := range []string{"agent", "workload"} {
		if err := guestHierarchy().Open(g).Create(); err != nil {
			return nil, err
		}
	}
	if err := unix.Mount("tmpfs", guestRun, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=256k,mode=0755"); err != nil {
		return nil, fmt.Errorf("mount %s: %w", guestRun, err)
	}
	// The guest's init survives the guest's OOM killer; the agent proper
	// gets the same, and its commands do not inherit it.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	// The workload's memory limit is its cgroup's (applyGuest), as on a
	// host. The kernel's overcommit guess would refuse one allocation
	// larger than the guest's RAM at once, which the program sees as a
	// failure of its own (Python's MemoryError) and the host cannot tell
	// from any other: the allocation is made, charged as it is written,
	// and the limit's OOM kill ends the command, which its group counts.
	if err := os.WriteFile("/proc/sys/vm/overcommit_memory", []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("let the guest's memory be limited by its cgroup alone: %w", err)
	}
	port, err := openPort(boot.Port, 20*time.Second)
	if err != nil {
		return nil, err
	}
	return port, nil
}

// guestHierarchy is the guest's cgroup v2.
func guestHierarchy() *cgroup.Hierarchy {
	m := map[string]string{}
	for _, c := range cgroup.V2Controllers {
		m[c] = guestCgroup
	}
	return &cgroup.Hierarchy{V2: true, Mounts: m}
}

// loadModule loads the kernel module in file.
func loadModule(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("load module %s: %w", filepath.Base(file), err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", filepath.Base(file), err)
	}
	return nil
}

// leaveInitramfs makes a tmpfs the init's root, with /dev, /proc and /sys
// moved over, and frees the initramfs (the agent's own binary stays in
// memory while it runs). pivot_root cannot leave the initramfs, and the
// agent proper pivots: its old root must be a mount of its own.
func leaveInitramfs() error {
	const next = "/.next"
	if err := os.Mkdir(next, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", next, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mount the init's root: %w", err)
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", strings.TrimPrefix(guestRootDisk, "/")} {
		if err := os.Mkdir(filepath.Join(next, d), 0o755); err != nil {
			return err
		}
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if err := unix.Mount(d, next+d, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", d, err)
		}
	}
	ents, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range ents {
		if "/"+e.Name() != next {
			_ = os.RemoveAll("/" + e.Name())
		}
	}
	if err := unix.Chdir(next); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the init's root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("enter the init's root: %w", err)
	}
	return unix.Chdir("/")
}

// waitFor waits until path exists (a device the kernel is still probing).
func waitFor(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// openPort opens the virtio-serial port called name.
func openPort(name string, timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			if err := waitFor(dev, time.Until(deadline)); err != nil {
				return nil, err
			}
			f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("open the host's port %s: %w", dev, err)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port %q within %v", name, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// readGuestConfig reads the host's Config from the port. The port reads
// end-of-file while no host is connected (as in a machine just restored,
// for a moment): it is read again until the host is there.
func readGuestConfig(port *os.File) (*agent.Config, []byte, error) {
	r := &waitingReader{f: port}
	cfg, raw, err := agent.ReadConfigJSON(r)
	if err != nil {
		return nil, nil, fmt.Errorf("read the sandbox's config: %w", err)
	}
	if cfg.Guest == nil {
		return nil, nil, errors.New("read the sandbox's config: it has no guest part")
	}
	return cfg, raw, nil
}

// waitingReader reads f, taking end-of-file for "not yet".
type waitingReader struct{ f *os.File }

func (r *waitingReader) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 || !errors.Is(err, io.EOF) {
			return n, err
		}
		time.Sleep(time.Millisecond)
	}
}

// applyGuest makes the guest this sandbox's: its clock, fresh randomness,
// the workload's limits.
func applyGuest(g *agent.GuestConfig) error {
	if g.TimeUnixNano > 0 {
		tv := unix.NsecToTimeval(g.TimeUnixNano)
		if err := unix.Settimeofday(&tv); err != nil {
			return fmt.Errorf("set the guest's clock: %w", err)
		}
	}
	if err := addEntropy(g.Seed); err != nil {
		return err
	}
	return guestHierarchy().Open("workload").Set(cgroup.Limits{MemoryBytes: g.MemoryBytes, Pids: g.Pids})
}

// addEntropy mixes seed into the kernel's entropy pool, credits it, and
// makes the kernel reseed its generator at once, so that nothing drawn
// from here on repeats what another machine restored from the same
// snapshot draws.
func addEntropy(seed []byte) error {
	if len(seed) < 32 {
		return fmt.Errorf("the host sent %d bytes of seed; at least 32 are needed", len(seed))
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open the entropy pool: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed))
	putInt32(info[0:], int32(len(seed)*8))
	putInt32(info[4:], int32(len(seed)))
	copy(info[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptrOf(&info[0])); e != 0 {
		return fmt.Errorf("seed the entropy pool: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDRESEEDCRNG, 0); e != 0 {
		return fmt.Errorf("reseed the random generator: %w", e)
	}
	return nil
}

// putInt32 writes v in the machine's byte order (little-endian: amd64,
// arm64).
func putInt32(b []byte, v int32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// identityFiles are the files of /etc that make a sandbox itself: name
// to content. They are files of the init's tmpfs, bound over the root
// disk's: what the init writes there, the sandbox sees.
func identityFiles(cfg *agent.Config) map[string]string {
	machineID := ""
	if cfg.Guest != nil {
		machineID = cfg.Guest.MachineID + "\n"
	}
	return map[string]string{
		"hostname":   cfg.Hostname + "\n",
		"hosts":      fmt.Sprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost\n", cfg.Hostname),
		"machine-id": machineID,
	}
}

// writeIdentity writes the identity files of cfg.
func writeIdentity(cfg *agent.Config) error {
	for name, content := range identityFiles(cfg) {
		if err := os.WriteFile(filepath.Join(guestRun, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	return nil
}

// guestAgent is the agent proper, started by the guest's init.
type guestAgent struct {
	cmd   *exec.Cmd
	ctl   *os.File // the init's end of the agent's control socket
	cfg   *os.File // where its configs go
	ready *os.File // reads end-of-file once it waits for its sandbox
}

// templateConfig is the config the agent proper builds the sandbox with
// before there is one: the defaults of every sandbox, which the sandbox's
// own config then changes.
func templateConfig() *agent.Config {
	l := sandbox.Limits{}.WithDefaults()
	cfg := &agent.Config{
		Hostname: "sandbox", DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: guestUID, GID: guestUID, OpenFiles: l.OpenFiles, FileSize: l.DiskBytes,
		Template: true,
	}
	if os.Getenv(agent.GuestWarmEnv) == "1" {
		cfg.WarmUp = warmUps
	}
	return cfg
}

// warmUps run before a snapshot is saved: a program, the shell and
// Python, whose files most commands read.
var warmUps = [][]string{{"/bin/true"}, {"/bin/sh", "-c", "true"}, {"python3", "-c", "pass"}}

// guestUID is the workload's uid and gid in a guest.
const guestUID = 1000

// startAgent starts the agent proper on a template config, in new pid,
// mount, UTS and IPC namespaces and the guest's agent cgroup, handing it
// the port, the root disk, the workload's cgroup and the identity files.
func startAgent(port *os.File) (*guestAgent, error) {
	cfg := templateConfig()
	if err := writeIdentity(cfg); err != nil {
		return nil, err
	}
	var extra []*os.File // from agent.FDFirst on
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	add := func(f *os.File) int {
		extra = append(extra, f)
		return agent.FDFirst + len(extra) - 1
	}
	root, err := unix.OpenTree(unix.AT_FDCWD, guestRootDisk, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open the root file system: %w", err)
	}
	cfg.Root = add(os.NewFile(uintptr(root), "root"))
	workload, err := unix.Open(filepath.Join(guestCgroup, "workload"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the workload's cgroup: %w", err)
	}
	cfg.Cgroup = agent.CgroupConfig{V2: true, FDs: []int{add(os.NewFile(uintptr(workload), "workload"))}, Controllers: [][]string{cgroup.V2Controllers}}
	for name := range identityFiles(cfg) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(guestRun, name), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("bind /etc/%s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
			f.Close()
			return nil, fmt.Errorf("make /etc/%s read-only: %w", name, err)
		}
		cfg.Mounts = append(cfg.Mounts, agent.MountConfig{FD: add(f), Target: "/etc/" + name})
	}
	ctl, err := controlPair()
	if err != nil {
		return nil, err
	}
	cfg.GuestControl = add(ctl[1])
	readyR, readyW, err := os.Pipe()
	if err != nil {
		ctl[0].Close()
		return nil, err
	}
	cfg.ReadyFD = add(readyW)
	agentGroup, err := unix.Open(filepath.Join(guestCgroup, "agent"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		readyR.Close()
		return nil, fmt.Errorf("open the agent's cgroup: %w", err)
	}
	defer unix.Close(agentGroup)
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		readyR.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"airlock-agent"},
		Env:        []string{},
		Stderr:     os.Stderr,
		ExtraFiles: append([]*os.File{cfgR, port}, extra...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
			Setsid:      true,
			UseCgroupFD: true,
			CgroupFD:    agentGroup,
		},
	}
	err = cmd.Start()
	cfgR.Close()
	if err != nil {
		readyR.Close()
		cfgW.Close()
		return nil, fmt.Errorf("start the agent: %w", err)
	}
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte("-1000"), 0)
	a := &guestAgent{cmd: cmd, cfg: cfgW, ready: readyR, ctl: ctl[0]}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		a.kill()
		return nil, fmt.Errorf("configure the agent: %w", err)
	}
	return a, nil
}

// waitBuilt waits until the agent has built the sandbox and waits for it:
// it writes a byte, or dies (end of file).
func (a *guestAgent) waitBuilt() error {
	defer a.ready.Close()
	if n, _ := a.ready.Read(make([]byte, 1)); n != 1 {
		return errors.New("the agent exited while it built the sandbox")
	}
	return nil
}

// claim makes the built sandbox cfg's: its identity files and the agent's
// limits, then the agent takes on the rest from cfg, which it reads from
// the JSON the host sent (raw: the agent ignores the guest's part).
func (a *guestAgent) claim(cfg *agent.Config, raw []byte) error {
	if err := writeIdentity(cfg); err != nil {
		return err
	}
	pid := a.cmd.Process.Pid
	for _, l := range []struct {
		res int
		val int64
	}{{unix.RLIMIT_NOFILE, int64(cfg.OpenFiles)}, {unix.RLIMIT_FSIZE, cfg.FileSize}} {
		if l.val <= 0 {
			continue
		}
		lim := &unix.Rlimit{Cur: uint64(l.val), Max: uint64(l.val)}
		if err := unix.Prlimit(pid, l.res, lim, nil); err != nil {
			return fmt.Errorf("set the agent's limit %d: %w", l.res, err)
		}
	}
	_, err := a.cfg.Write(append(raw, '\n'))
	if cerr := a.cfg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		a.kill()
		return fmt.Errorf("hand the agent its sandbox: %w", err)
	}
	return nil
}

func (a *guestAgent) kill() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}

// guestInit runs the guest's init and then ends the machine: a restart,
// which QEMU (with -no-reboot) takes as its end. exitAtOnce ends it before
// anything is booted.
func guestInit(exitAtOnce bool) int {
	if !exitAtOnce {
		if err := guestMain(); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-guest: %v\n", err)
		}
	}
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	return 1
}

// controlPair is the agent's control socket to the init: the init's end,
// the agent's.
func controlPair() ([2]*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return [2]*os.File{}, fmt.Errorf("make the agent's control socket: %w", err)
	}
	return [2]*os.File{os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control")}, nil
}

// serveControl applies each agent.GuestRefresh the agent sends (a resume
// of the machine: the host's clock, fresh entropy, for a clone its
// identity) and answers "ok" or what failed, until the agent ends.
func serveControl(ctl *os.File) {
	r := bufio.NewReaderSize(ctl, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		answer := "ok"
		var ref agent.GuestRefresh
		if err := json.Unmarshal(line, &ref); err != nil {
			answer = "read the refresh: " + err.Error()
		} else if err := applyRefresh(&ref); err != nil {
			answer = err.Error()
		}
		if _, err := ctl.WriteString(strings.ReplaceAll(answer, "\n", " ") + "\n"); err != nil {
			return
		}
	}
}

// applyRefresh makes a resumed guest take on ref.
func applyRefresh(ref *agent.GuestRefresh) error {
	if ref.TimeUnixNano > 0 {
		tv := unix.NsecToTimeval(ref.TimeUnixNano)
		if err := unix.Settimeofday(&tv); err != nil {
			return fmt.Errorf("set the guest's clock: %w", err)
		}
	}
	if err := addEntropy(ref.Seed); err != nil {
		return err
	}
	if ref.Hostname == "" {
		return nil
	}
	return writeIdentity(&agent.Config{Hostname: ref.Hostname, Guest: &agent.GuestConfig{MachineID: ref.MachineID}})
}
