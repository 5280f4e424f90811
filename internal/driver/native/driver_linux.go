package native

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/confine"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Workload uid and gid inside every sandbox; the agent is uid 0 there.
const (
	workloadUID = 1000
	workloadGID = 1000
)

// Driver runs sandboxes with Linux namespaces, cgroups, seccomp and Landlock.
type Driver struct {
	opts    Options
	agent   string
	hier    *cgroup.Hierarchy // nil when the host has no usable cgroups
	hierErr error
	sweep   sync.Once
	oomOnce sync.Once

	egressOnce sync.Once
	egress     *egress.Proxy // see proxy
}

var _ sandbox.Driver = (*Driver)(nil)

// New returns a native driver. It fails only when the agent binary cannot
// be found; what the host lacks is reported by Probe and Create.
func New(opts Options) (*Driver, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = "airlock"
	}
	if opts.StateDir == "" {
		opts.StateDir = "/run/airlock"
	}
	d := &Driver{opts: opts}
	var err error
	if d.agent, err = agentbin.Path(); err != nil {
		return nil, err
	}
	d.hier, d.hierErr = cgroup.Detect()
	return d, nil
}

// Name is "native".
func (d *Driver) Name() string { return "native" }

// Probe reports the first layer this host lacks.
func (d *Driver) Probe(ctx context.Context) error {
	_, err := d.layers(nil)
	return err
}

// layers checks the layers that can be missing and returns those in
// effect; a missing layer not in allow is an error.
func (d *Driver) layers(allow []sandbox.Layer) ([]sandbox.Layer, error) {
	if os.Geteuid() != 0 {
		return nil, &sandbox.LayerError{Layer: sandbox.LayerUIDRange, Why: "the native driver needs root to give each sandbox its own range of host uids", Fix: "run airlock as root (sudo airlock …)"}
	}
	on := []sandbox.Layer{sandbox.LayerUserNS, sandbox.LayerPidNS, sandbox.LayerMountNS, sandbox.LayerNetNS, sandbox.LayerIPCNS, sandbox.LayerUTSNS, sandbox.LayerCgroupNS, sandbox.LayerUIDRange}
	degrade := func(l sandbox.Layer, why, fix string) error {
		for _, a := range allow {
			if a == l {
				return nil
			}
		}
		return &sandbox.LayerError{Layer: l, Why: why, Fix: fix}
	}
	if d.hier == nil {
		if err := degrade(sandbox.LayerCgroups, d.hierErr.Error(), "mount the memory, pids, cpu, cpuacct and freezer cgroup v1 controllers, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"); err != nil {
			return nil, err
		}
	} else {
		on = append(on, sandbox.LayerCgroups)
	}
	if err := confine.Supported(); err != nil {
		if err := degrade(sandbox.LayerSeccomp, err.Error(), "use a kernel built with CONFIG_SECCOMP_FILTER"); err != nil {
			return nil, err
		}
	}
	if confine.LandlockABI() == 0 {
		if err := degrade(sandbox.LayerLandlock, "the kernel has no Landlock (needs Linux 5.13+ with landlock in the lsm= list)", "boot with lsm=landlock,… or a kernel with CONFIG_SECURITY_LANDLOCK"); err != nil {
			return nil, err
		}
	}
	return on, nil
}

// Create starts a sandbox: a new agent in new namespaces, its cgroups, its
// own host uid range. Anything made before an error is removed again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (_ sandbox.Instance, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec.Limits = spec.Limits.WithDefaults()
	hostLayers, err := d.layers(spec.AllowDegraded)
	if err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = newID()
	}
	// Leftovers of airlock processes that died uncleanly (their locks are
	// free) are swept once per driver, before its first sandbox: a one-shot
	// `airlock run` cleans up after a killed one.
	d.sweep.Do(d.sweepStale)

	in := &instance{d: d, spec: spec, done: make(chan struct{}), procs: map[string]*process{}}
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()

	lock, err := lockFile(filepath.Join(d.opts.StateDir, "sandboxes"), spec.ID)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	undo.add(func() { os.Remove(lock.Name()); lock.Close() })
	in.lock = lock
	slot, base, err := allocRange(filepath.Join(d.opts.StateDir, "uids"))
	if err != nil {
		return nil, err
	}
	undo.add(func() { slot.Close() })
	in.slot, in.base = slot, base

	var extra []*os.File // handed to the agent from FDFirst on
	closeExtra := func() {
		for _, f := range extra {
			f.Close()
		}
	}
	defer closeExtra()
	cfg := agent.Config{
		Hostname: "sandbox", DiskBytes: spec.Limits.DiskBytes, TmpBytes: spec.Limits.TmpBytes,
		UID: workloadUID, GID: workloadGID, Env: spec.Env, OpenFiles: spec.Limits.OpenFiles,
		FileSize: spec.Limits.DiskBytes, KeepExecCgroups: true,
	}
	if err := in.setupEgress(&cfg, &undo); err != nil {
		return nil, err
	}
	if d.hier == nil {
		// Without cgroups RLIMIT_NPROC is the process limit; with them it
		// stays out of the way, so that the pids controller (which counts
		// what it refuses) is the limit hit.
		cfg.Pids = spec.Limits.Pids
	}
	// A layer the caller accepted doing without is left out only when the
	// host really lacks it.
	if d.hier == nil {
		cfg.Skip = append(cfg.Skip, sandbox.LayerCgroups)
	}
	if confine.Supported() != nil {
		cfg.Skip = append(cfg.Skip, sandbox.LayerSeccomp)
	}
	if d.hier != nil {
		if err := in.makeCgroups(&undo); err != nil {
			return nil, err
		}
		dirs, err := in.workload.OpenDirs()
		if err != nil {
			return nil, err
		}
		cfg.Cgroup.V2 = d.hier.V2
		cfg.Cgroup.Controllers = d.hier.Roots()
		for _, f := range dirs {
			cfg.Cgroup.FDs = append(cfg.Cgroup.FDs, agent.FDFirst+len(extra))
			extra = append(extra, f)
		}
		if !d.hier.V2 {
			tasks, err := in.agentGroup.OpenTasks()
			if err != nil {
				return nil, err
			}
			for _, f := range tasks {
				cfg.AgentTasks = append(cfg.AgentTasks, agent.FDFirst+len(extra))
				extra = append(extra, f)
			}
		}
	}
	if spec.Root != "" {
		f, err := detachedMount(spec.Root, false, true)
		if err != nil {
			return nil, fmt.Errorf("root %s: %w", spec.Root, err)
		}
		cfg.Root = agent.FDFirst + len(extra)
		extra = append(extra, f)
	}
	for _, m := range spec.Mounts {
		f, isDir, err := openMount(m)
		if err != nil {
			return nil, err
		}
		cfg.Mounts = append(cfg.Mounts, agent.MountConfig{FD: agent.FDFirst + len(extra), Target: m.Target, Dir: isDir, Writable: m.Writable})
		extra = append(extra, f)
	}

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("make the agent connection: %w", err)
	}
	hostEnd, agentEnd := os.NewFile(uintptr(fds[0]), "agent-conn"), os.NewFile(uintptr(fds[1]), "agent-conn")
	defer agentEnd.Close()
	conn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		return nil, fmt.Errorf("make the agent connection: %w", err)
	}
	undo.add(func() { conn.Close() })
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()

	cmd := &exec.Cmd{
		Path:       d.agent,
		Args:       []string{"airlock-agent"},
		Env:        []string{}, // nothing of airlock's environment reaches the sandbox
		Stderr:     &in.agentLog,
		ExtraFiles: append([]*os.File{cfgR, agentEnd}, extra...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
				unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: rangeSize}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: base, Size: rangeSize}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Pdeathsig:                  syscall.SIGKILL,
			Setsid:                     true,
		},
	}
	if d.hier != nil && d.hier.V2 {
		fd, err := unix.Open(in.agentGroup.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open the agent's cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the sandbox: %w", err)
	}
	in.cmd = cmd
	undo.add(func() { in.stopAgent() })
	go func() {
		_ = cmd.Wait()
		close(in.done)
	}()
	// The agent holds its ends now; once it exits, the host sees EOF at
	// once instead of waiting for a handshake that cannot come.
	closeExtra()
	extra = nil
	agentEnd.Close()
	cfgR.Close()
	// The agent moves itself into its cgroup (v1) before it builds anything.
	if err := json.NewEncoder(cfgW).Encode(&cfg); err != nil {
		return nil, fmt.Errorf("configure the sandbox: %w%s", err, in.agentErr())
	}
	cfgW.Close()
	// The agent survives the host's OOM killer; its commands do not inherit
	// this. It takes CAP_SYS_RESOURCE, which some hosts (containers, VMs)
	// withhold even from root; the agent's own cgroup still shields it from
	// the workload's out-of-memory kills there.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", cmd.Process.Pid), []byte("-1000"), 0); err != nil {
		d.oomOnce.Do(func() {
			d.opts.Logger.Warn("cannot protect sandbox agents from the host's OOM killer (needs CAP_SYS_RESOURCE)", "err", err)
		})
	}

	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	client, agentLayers, err := agent.Dial(dctx, conn)
	if err != nil {
		// An agent that failed says why on stderr; that is read to the end
		// once it has exited.
		select {
		case <-in.done:
		case <-time.After(2 * time.Second):
		}
		return nil, fmt.Errorf("start the sandbox: %w%s", err, in.agentErr())
	}
	in.client = client
	in.startEgress()
	in.layers = append(hostLayers, agentLayers...)
	in.created = time.Now()
	in.lifetime = time.AfterFunc(spec.Limits.Lifetime, func() {
		d.opts.Logger.Info("sandbox lifetime reached", "sandbox_id", spec.ID)
		_ = in.Close(context.Background())
	})
	return in, nil
}

// rangeSize is the number of host uids (and gids) each sandbox gets.
const rangeSize = 65536

func (in *instance) makeCgroups(undo *cleanups) error {
	h := in.d.hier
	in.group = h.Open(in.d.opts.CgroupParent + "/" + in.spec.ID)
	in.agentGroup = in.group.Child("agent")
	in.workload = in.group.Child("workload")
	undo.add(func() { in.removeCgroups() })
	for _, g := range []*cgroup.Group{in.group, in.agentGroup, in.workload} {
		if err := g.Create(); err != nil {
			return err
		}
	}
	l := in.spec.Limits
	if err := in.workload.Set(cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids}); err != nil {
		return err
	}
	// The agent gets room for the files it writes on the workload's behalf,
	// and a thread cap of its own.
	if err := in.agentGroup.Set(cgroup.Limits{MemoryBytes: l.DiskBytes + l.TmpBytes + 128<<20, Pids: 256}); err != nil {
		return err
	}
	if err := in.workload.Delegate(in.base, in.base); err != nil {
		return err
	}
	return in.group.DelegateProcs(in.base, in.base)
}

func (in *instance) removeCgroups() {
	if in.group == nil {
		return
	}
	_ = in.group.Kill(5 * time.Second)
	if err := in.group.Remove(); err != nil {
		in.d.opts.Logger.Warn("remove sandbox cgroups", "sandbox_id", in.spec.ID, "err", err)
	}
}

// stopAgent kills the agent; as PID 1 of the sandbox its death takes every
// process of the sandbox with it.
func (in *instance) stopAgent() {
	if in.cmd == nil || in.cmd.Process == nil {
		return
	}
	_ = in.cmd.Process.Kill()
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		in.d.opts.Logger.Error("sandbox agent did not exit after SIGKILL", "sandbox_id", in.spec.ID)
	}
}

// agentErr returns what the agent wrote to stderr, for an error message.
func (in *instance) agentErr() string {
	b := bytes.TrimSpace(in.agentLog.Bytes())
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// sweepStale removes what sandboxes of airlock processes that died without
// cleaning up left behind: their cgroups. A sandbox is stale when no live
// process holds its lock.
func (d *Driver) sweepStale() {
	if d.hier == nil {
		return
	}
	parent := d.hier.Open(d.opts.CgroupParent)
	names, err := parent.Children()
	if err != nil {
		return
	}
	for _, name := range names {
		if !sandbox.ValidID(name) {
			continue
		}
		lock, err := lockFile(filepath.Join(d.opts.StateDir, "sandboxes"), name)
		if err != nil {
			continue // alive
		}
		g := parent.Child(name)
		_ = g.Kill(5 * time.Second)
		if err := g.Remove(); err != nil {
			d.opts.Logger.Warn("remove stale sandbox cgroups", "sandbox_id", name, "err", err)
		}
		os.Remove(lock.Name())
		lock.Close()
	}
}

// Reap removes every stale sandbox's leftovers now.
func (d *Driver) Reap() { d.sweepStale() }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// cleanups undoes a half-built sandbox in reverse order.
type cleanups struct{ fns []func() }

func (c *cleanups) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanups) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}

// lockFile takes an exclusive lock on dir/name.lock, which this process
// holds until it closes the file or dies.
func lockFile(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("make state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, sandbox.ErrExists
		}
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

// allocRange takes one of the host uid ranges that sandboxes own, one
// each, so that per-uid kernel limits are never shared between sandboxes.
func allocRange(dir string) (*os.File, int, error) {
	const first, slots = 0x10000000, 4096
	var b [2]byte
	_, _ = rand.Read(b[:])
	start := int(b[0])<<8 | int(b[1])
	for i := 0; i < slots; i++ {
		slot := (start + i) % slots
		f, err := lockFile(dir, strconv.Itoa(slot))
		if errors.Is(err, sandbox.ErrExists) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return f, first + slot*rangeSize, nil
	}
	return nil, 0, fmt.Errorf("all %d uid ranges are in use: %w", slots, sandbox.ErrLimit)
}
