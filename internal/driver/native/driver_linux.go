package native

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/confine"
	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/forker"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/hosttasks"
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
	rc      *agentdriver.Recipe
	hier    *cgroup.Hierarchy // nil when the host has no usable cgroups
	hierErr error
	oomOnce sync.Once
}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Recoverer = (*Driver)(nil)
)

// New returns a native driver. It fails only when the agent binary cannot
// be found; what the host lacks is reported by Probe and Create.
func New(opts Options) (*Driver, error) {
	d := &Driver{opts: opts}
	var err error
	if d.rc, err = agentdriver.NewRecipe("native", opts.shared(), true, d.Sweep); err != nil {
		return nil, err
	}
	d.hier, d.hierErr = cgroup.Detect()
	return d, nil
}

// persistent says whether the driver's sandboxes outlive its process
// (Options.Persistent).
func (d *Driver) persistent() bool { return d.rc != nil && d.rc.Persistent }

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
		if slices.Contains(allow, l) {
			return nil
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

// Capabilities says what native sandboxes can do.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true,
		Egress: true, HostRoot: true, HostMounts: true, PerExecUsage: true, PTY: true, Snapshots: true, CowMounts: true, Home: true,
		Images: true, ImageRoot: true,
		SurvivesRestart: d.rc.Persistent,
		// Pause is a freeze of the workload's cgroup: its memory stays.
		Pause: true, MemoryKeptInHost: true,
		Lacks: map[sandbox.Capability]sandbox.Lack{
			sandbox.CapLiveFork: {Why: "the native driver cannot copy running processes (CRIU cannot checkpoint a native sandbox here: docs/decisions.md, 56)", Fix: "fork from a snapshot of its files, or use the gvisor driver"},
		},
	}
}

// Create starts a sandbox: a new agent in new namespaces, its cgroups, its
// own host uid range. Anything made before an error is removed again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return d.rc.Create(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Start: d.start})
}

// CreateRun is Create of a one-shot run's sandbox, its command req sent
// with the agent's config (sandbox.RunCreator).
func (d *Driver) CreateRun(ctx context.Context, spec sandbox.Spec, req sandbox.ExecRequest) (sandbox.Instance, error) {
	return d.rc.CreateRun(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Start: d.start}, req)
}

// start is Create's own part: the agent, forked into its namespaces with
// what it is handed, and its handshake.
func (d *Driver) start(ctx context.Context, b *agentdriver.Build) (_ *agent.Client, _ []sandbox.Layer, err error) {
	spec := b.Spec
	hostLayers, err := d.layers(spec.AllowDegraded)
	if err != nil {
		return nil, nil, err
	}
	h := &host{d: d, spec: spec, lock: b.Lock, done: make(chan struct{}), created: time.Now()}
	b.Host(h)
	if h.slot, h.base, err = hostlock.UIDRange(d.rc.StateDir); err != nil {
		return nil, nil, err
	}

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
		FileSize: spec.Limits.DiskBytes, KeepExecCgroups: true, Home: spec.Home,
	}
	if err := b.Egress(&cfg); err != nil {
		return nil, nil, err
	}
	if d.hier == nil {
		// Without cgroups RLIMIT_NPROC is the process limit; with them it
		// stays out of the way, so that the pids controller (which counts
		// what it refuses) is the limit hit.
		cfg.Pids = spec.Limits.Pids
		// A layer the caller accepted doing without is left out only when
		// the host really lacks it.
		cfg.Skip = append(cfg.Skip, sandbox.LayerCgroups)
	}
	if confine.Supported() != nil {
		cfg.Skip = append(cfg.Skip, sandbox.LayerSeccomp)
	}
	if d.hier != nil {
		if err := h.makeCgroups(); err != nil {
			return nil, nil, err
		}
		dirs, err := h.workload.OpenDirs()
		if err != nil {
			return nil, nil, err
		}
		cfg.Cgroup.V2 = d.hier.V2
		cfg.Cgroup.Controllers = d.hier.Roots()
		for _, f := range dirs {
			cfg.Cgroup.FDs = append(cfg.Cgroup.FDs, agent.FDFirst+len(extra))
			extra = append(extra, f)
		}
		if !d.hier.V2 {
			tasks, err := h.agentGroup.OpenTasks()
			if err != nil {
				return nil, nil, err
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
			return nil, nil, fmt.Errorf("root %s: %w", spec.Root, err)
		}
		cfg.Root = agent.FDFirst + len(extra)
		extra = append(extra, f)
	}
	for i, m := range spec.Mounts {
		if m.Cow {
			_, f, err := cow.Make(ctx, cow.LayerDir(d.rc.StateDir, spec.ID, i), spec.ID, m, spec.Limits.DiskBytes,
				cow.IDMap{UID: h.base + workloadUID, GID: h.base + workloadGID})
			if err != nil {
				return nil, nil, err
			}
			cfg.Mounts = append(cfg.Mounts, agent.MountConfig{FD: agent.FDFirst + len(extra), Target: m.Target, Dir: true, Writable: true})
			extra = append(extra, f)
			continue
		}
		f, isDir, err := openMount(m)
		if err != nil {
			return nil, nil, err
		}
		cfg.Mounts = append(cfg.Mounts, agent.MountConfig{FD: agent.FDFirst + len(extra), Target: m.Target, Dir: isDir, Writable: m.Writable})
		extra = append(extra, f)
	}

	// The agent's end of its connection: a socketpair's, or (persistent) a
	// socket bound at the sandbox's session path, which the agent listens
	// on.
	var agentEnd *os.File
	args := []string{"airlock-agent"}
	var hold []*os.File // what the agent keeps open for its life: the locks
	var stderr io.Writer = &h.agentLog
	if d.rc.Persistent {
		h.persistent = true
		if agentEnd, err = h.bindSession(); err != nil {
			return nil, nil, err
		}
		logFile, err := os.OpenFile(h.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_CLOEXEC, 0o600)
		if err != nil {
			agentEnd.Close()
			return nil, nil, fmt.Errorf("make the agent's log: %w", err)
		}
		defer logFile.Close()
		stderr = logFile
		args = append(args, agent.ListenArg)
		cfg.Listen = &agent.ListenConfig{FD: agent.FDConn}
		// The kernel drops a flock only when every descriptor of it is
		// closed: the agent's copies keep the sandbox's id and uid range
		// taken after this process is gone.
		hold = []*os.File{h.lock.File(), h.slot.File()}
	} else {
		if b.Run != nil && os.Getenv(agent.EnvExecSockets) != "0" {
			// A one-shot run's command: its start waits on its exec
			// socket for the agent, which serves it once the sandbox is
			// built. (With exec sockets off, it is an exec as any.)
			rs, f, err := agent.NewRunSocket(b.Run)
			if err != nil {
				return nil, nil, err
			}
			b.FollowRun(rs.Open, rs.Close)
			cfg.RunSocket = agent.FDFirst + len(extra)
			extra = append(extra, f)
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("make the agent connection: %w", err)
		}
		hostEnd := os.NewFile(uintptr(fds[0]), "agent-conn")
		agentEnd = os.NewFile(uintptr(fds[1]), "agent-conn")
		h.conn, err = net.FileConn(hostEnd)
		hostEnd.Close()
		if err != nil {
			agentEnd.Close()
			return nil, nil, fmt.Errorf("make the agent connection: %w", err)
		}
	}
	defer agentEnd.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()

	sys := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
			unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: h.base, Size: hostlock.RangeSize}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: h.base, Size: hostlock.RangeSize}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Setsid:                     true,
	}
	if !d.rc.Persistent {
		// A one-shot run's sandbox dies with its process.
		sys.Pdeathsig = syscall.SIGKILL
	}
	if d.hier != nil && d.hier.V2 {
		fd, err := unix.Open(h.agentGroup.Path("memory"), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("open the agent's cgroup: %w", err)
		}
		defer unix.Close(fd)
		sys.UseCgroupFD, sys.CgroupFD = true, fd
	}
	files := append(append([]*os.File{cfgR, agentEnd}, extra...), hold...)
	var fk *forker.Client
	if d.rc.Persistent {
		// A daemon's sandboxes are forked by the forker, whose page tables
		// stay small however many sandboxes the daemon holds; a one-shot
		// run's agent is forked here, where its parent-death signal
		// follows this process.
		fk = forkerOf(d.rc.Agent)
	}
	proc, err := startAgent(fk, d.rc.Agent, args, stderr, files, sys)
	if err != nil {
		// EAGAIN near kernel.pid_max: say which limit and how to raise it.
		return nil, nil, fmt.Errorf("start the sandbox: %w", hosttasks.Host.Explain(err))
	}
	h.proc = proc
	h.agentPid = proc.pid
	go func() {
		proc.wait()
		h.closeDone()
	}()
	// The agent holds its ends now; once it exits, the host sees EOF at
	// once instead of waiting for a handshake that cannot come.
	closeExtra()
	extra = nil
	agentEnd.Close()
	cfgR.Close()
	// The agent moves itself into its cgroup (v1) before it builds anything.
	if err := json.NewEncoder(cfgW).Encode(&cfg); err != nil {
		return nil, nil, fmt.Errorf("configure the sandbox: %w%s", err, h.agentErr())
	}
	cfgW.Close()
	// The agent survives the host's OOM killer; its commands do not inherit
	// this. It takes CAP_SYS_RESOURCE, which some hosts (containers, VMs)
	// withhold even from root; the agent's own cgroup still shields it from
	// the workload's out-of-memory kills there.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", proc.pid), []byte("-1000"), 0); err != nil {
		d.oomOnce.Do(func() {
			d.rc.Logger.Warn("cannot protect sandbox agents from the host's OOM killer (needs CAP_SYS_RESOURCE)", "err", err)
		})
	}

	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if h.persistent {
		// The agent listens before it reads its config: the connection
		// waits in its backlog until it serves.
		c, err := agentdriver.DialSession(dctx, h.sockPath, h.done)
		if err != nil {
			return nil, nil, fmt.Errorf("start the sandbox: %w%s", err, h.agentErr())
		}
		h.conn = c
	}
	client, agentLayers, err := h.dialAgent(dctx)
	if err != nil {
		// An agent that failed says why on stderr; that is read to the end
		// once it has exited.
		select {
		case <-h.done:
		case <-time.After(2 * time.Second):
		}
		return nil, nil, fmt.Errorf("start the sandbox: %w%s", err, h.agentErr())
	}
	if h.persistent {
		// The agent holds the sandbox's locks now, as it does for a
		// process that reattaches: this one keeps two descriptors per
		// sandbox, the agent's connection and its pidfd (Teardown takes
		// the sandbox's lock again once the agent is dead).
		h.slot.Drop()
		h.lock.Drop()
		h.slot, h.lock = nil, nil
	}
	return client, append(hostLayers, agentLayers...), nil
}

// Sweep removes what sandboxes of airlock processes that died without
// cleaning up left behind: their cgroups and session sockets. A sandbox is
// stale when no live process holds its lock (a persistent sandbox's agent
// holds its own: it is alive, whoever made it).
//
// Session sockets are a daemon's alone (a persistent sandbox's): a one-shot
// run, which has none, leaves them to the daemons, which sweep them when
// they start and then periodically. A one-shot run beside a daemon's
// thousands of sandboxes would otherwise check each of their locks twice
// before its own sandbox starts (docs/decisions.md, 79).
func (d *Driver) Sweep(context.Context) error {
	if d.persistent() {
		d.sweepSessions()
	}
	d.sweepCow()
	d.rc.SweepCgroups(d.hier)
	return nil
}

// RecoverCow says what applies of cow mounts' changes a crash of the
// process that ran them interrupted (and finishes their records), and
// removes the layers of sandboxes that are gone.
func (d *Driver) RecoverCow() ([]cow.Recovery, error) {
	return cow.RecoverAll(d.rc.StateDir)
}

// sweepCow removes the cow layers of stale sandboxes (RecoverCow keeps
// those with an interrupted apply's journal until it has read them).
func (d *Driver) sweepCow() {
	dirs, _ := filepath.Glob(filepath.Join(d.rc.StateDir, "cow", "*"))
	ids := make([]string, len(dirs))
	for i, p := range dirs {
		ids[i] = filepath.Base(p)
	}
	_ = hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
		layers, _ := filepath.Glob(filepath.Join(d.rc.StateDir, "cow", id, "*"))
		for _, l := range layers {
			if _, err := os.Stat(filepath.Join(l, "journal.json")); err == nil {
				continue
			}
			if err := cow.Remove(l); err != nil {
				d.rc.Logger.Warn("remove a stale cow layer", "sandbox_id", id, "dir", l, "err", err)
			}
		}
		return nil
	})
}

// sweepSessions removes the session sockets and agent logs of stale
// sandboxes.
func (d *Driver) sweepSessions() {
	dir := filepath.Join(d.rc.StateDir, "sessions")
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	ids := make([]string, len(socks))
	for i, p := range socks {
		ids[i] = strings.TrimSuffix(filepath.Base(p), ".sock")
	}
	_ = hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
		_ = os.Remove(filepath.Join(dir, id+".sock"))
		_ = os.Remove(filepath.Join(dir, id+".log"))
		return nil
	})
}
