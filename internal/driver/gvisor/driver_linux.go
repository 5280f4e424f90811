package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/runsc"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver runs sandboxes in gVisor with runsc.
type Driver struct {
	opts     Options
	rc       *agentdriver.Recipe
	runsc    *runsc.Binary
	runscErr error
	platform string
	hier     *cgroup.Hierarchy // nil when the host has no usable cgroups
	hierErr  error
	swap     bool // the host's memory controller limits swap
	// settling holds, by sandbox id, a channel closed once what a paused
	// sandbox held on the host is released (SettlePause).
	settling sync.Map
}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Recoverer = (*Driver)(nil)
)

// New returns a gVisor driver. It fails only when the agent binary cannot
// be found; what the host lacks (runsc, root, cgroups) is reported by
// Probe and Create. It asks runsc what it knows (about 10 ms).
func New(opts Options) (*Driver, error) {
	d := &Driver{opts: opts}
	var err error
	if d.rc, err = agentdriver.NewRecipe("gvisor", opts.shared(), true, d.Sweep); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts.Runsc != "" {
		d.runsc, d.runscErr = runsc.Inspect(ctx, opts.Runsc)
	} else {
		d.runsc, d.runscErr = runsc.Find(ctx)
	}
	if d.runsc != nil {
		d.platform = opts.Platform
		if d.platform == "" {
			d.platform = d.runsc.DefaultPlatform()
		}
		if !d.runsc.Pinned {
			d.rc.Logger.Warn("using a runsc that airlock did not build: run `make runsc` for the pinned one", "runsc", d.runsc.Describe())
		}
	}
	d.hier, d.hierErr = cgroup.Detect()
	if d.hier != nil {
		if d.hier.V2 {
			_, err = os.Stat(filepath.Join(d.hier.Mounts["memory"], d.rc.CgroupParent, "memory.swap.max"))
		} else {
			_, err = os.Stat(filepath.Join(d.hier.Mounts["memory"], "memory.memsw.limit_in_bytes"))
		}
		d.swap = err == nil
	}
	return d, nil
}

// Name is "gvisor".
func (d *Driver) Name() string { return "gvisor" }

// Runsc describes the runsc the driver uses, and the platform; nil when
// none was found.
func (d *Driver) Runsc() (*runsc.Binary, string) { return d.runsc, d.platform }

// Describe says which runsc and platform the driver uses.
func (d *Driver) Describe() string {
	if d.runsc == nil {
		return "no runsc"
	}
	return d.runsc.Describe() + ", platform " + d.platform
}

// probeTimeout bounds the start of Probe's sandbox.
var probeTimeout = 30 * time.Second

// Probe checks that this host can run gVisor sandboxes as Create makes
// them: root, cgroups, and a runsc that starts the agent in a sandbox of
// the default spec, within 30 s (on some hosts a platform hangs instead
// of failing). A runsc that runs a bare command but not the agent
// (Debian's 2022 build: the agent cannot make its root nosuid) fails
// here, as every Create would. It costs one sandbox's start and close.
func (d *Driver) Probe(ctx context.Context) error {
	if _, err := d.layers(nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := d.probeStart(ctx)
	if err == nil {
		return nil
	}
	why := fmt.Sprintf("%s cannot start airlock's agent in a sandbox on platform %s: %v", d.runsc.Describe(), d.platform, err)
	if ctx.Err() != nil {
		why = fmt.Sprintf("%s did not finish starting a sandbox on platform %s within %v: %v", d.runsc.Describe(), d.platform, probeTimeout, err)
	}
	fix := "build the pinned runsc with `make runsc`, or pick another platform"
	if d.runsc.Pinned {
		fix = "see why: every sandbox of this driver fails the same way"
	}
	return unsupported(why, fix)
}

// probeStart starts a sandbox of the default spec as Create does and
// closes it. It goes through a driver of its own, the same but for its
// sweep, which is taken as done: a probe removes nothing of other
// sandboxes (a daemon sweeps once it has reattached to its own).
func (d *Driver) probeStart(ctx context.Context) error {
	o := d.opts
	o.Runsc, o.Platform = d.runsc.Path, d.platform
	pd, err := New(o)
	if err != nil {
		return err
	}
	pd.rc.SkipSweep()
	in, err := pd.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	if err := in.Close(context.WithoutCancel(ctx)); err != nil {
		d.opts.Logger.Warn("close the gVisor probe's sandbox", "sandbox_id", in.ID(), "err", err)
	}
	return nil
}

// layers checks what the host must have and returns the host's layers in
// effect; a missing layer not in allow is an error.
func (d *Driver) layers(allow []sandbox.Layer) ([]sandbox.Layer, error) {
	if os.Geteuid() != 0 {
		return nil, unsupported("the gVisor driver needs root: runsc makes the sandbox's namespaces, and airlock its cgroups", "run airlock as root (sudo airlock …)")
	}
	if d.runsc == nil {
		return nil, unsupported(d.runscErr.Error(), "build the pinned runsc with `make runsc` (or apt-get install runsc: old, ptrace only)")
	}
	// The Sentry's own namespaces, and on the host runsc puts the Sentry
	// and gofer in new namespaces too.
	on := []sandbox.Layer{sandbox.LayerGVisor, sandbox.LayerPidNS, sandbox.LayerMountNS, sandbox.LayerNetNS, sandbox.LayerIPCNS, sandbox.LayerUTSNS}
	if d.hier == nil {
		if !slices.Contains(allow, sandbox.LayerCgroups) {
			return nil, &sandbox.LayerError{Layer: sandbox.LayerCgroups, Why: d.hierErr.Error(), Fix: "mount the memory, pids, cpu, cpuacct and freezer cgroup v1 controllers, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"}
		}
	} else {
		on = append(on, sandbox.LayerCgroups)
	}
	return on, nil
}

// Capabilities says what gVisor sandboxes can do.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true,
		Egress: true, HostRoot: true, HostMounts: true, PTY: true, Snapshots: true, SurvivesRestart: d.rc.Persistent, CowMounts: true, Home: true,
		Images: true, ImageRoot: true,
		Pause: d.rc.Persistent, LiveFork: d.rc.Persistent,
		Lacks: map[sandbox.Capability]sandbox.Lack{
			sandbox.CapPause:    {Why: "this gVisor driver's sandboxes die with the process that made them (a one-shot run's): there is no daemon to keep a paused one", Fix: "pause sandboxes of `airlock serve`"},
			sandbox.CapLiveFork: {Why: "this gVisor driver's sandboxes die with the process that made them (a one-shot run's): there is no daemon to keep the clones", Fix: "fork sandboxes of `airlock serve`"},
		},
	}
}

// Create starts a sandbox: its bundle, its host cgroup, `runsc run` with
// the agent as the container's process, and the agent's handshake.
// Anything made before an error is removed again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return d.rc.Create(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Start: d.start})
}

// CreateRun is Create of a one-shot run's sandbox, its command req sent
// with the agent's config (sandbox.RunCreator).
func (d *Driver) CreateRun(ctx context.Context, spec sandbox.Spec, req sandbox.ExecRequest) (sandbox.Instance, error) {
	return d.rc.CreateRun(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Start: d.start}, req)
}

// start is Create's own part: the bundle, the cgroup, `runsc run` and the
// agent's handshake.
func (d *Driver) start(ctx context.Context, bd *agentdriver.Build) (*agent.Client, []sandbox.Layer, error) {
	spec := bd.Spec
	hostLayers, err := d.layers(spec.AllowDegraded)
	if err != nil {
		return nil, nil, err
	}
	h := &host{d: d, spec: spec, lock: bd.Lock, created: time.Now()}
	bd.Host(h)
	h.bundle = filepath.Join(d.bundlesDir(), spec.ID)
	if err := os.MkdirAll(d.bundlesDir(), 0o700); err != nil {
		return nil, nil, fmt.Errorf("make the bundle directory: %w", err)
	}
	if err := os.Mkdir(h.bundle, 0o700); err != nil {
		return nil, nil, fmt.Errorf("make the bundle of %s: %w", spec.ID, err)
	}
	b := bundle{Agent: d.rc.Agent, Limits: spec.Limits, Host: hostLimitsFor(spec.Limits, d.swap)}
	if d.rc.Persistent {
		h.persistent = true
		h.session, h.logPath = filepath.Join(h.bundle, "session"), filepath.Join(h.bundle, "log")
		if err := os.Mkdir(h.session, 0o700); err != nil {
			return nil, nil, fmt.Errorf("make the session directory of %s: %w", spec.ID, err)
		}
		b.Session = h.session
	}
	// A cow mount's overlay shows the host directory's owner as the
	// workload's uid (gVisor keeps the host's uids: no user namespace).
	makeCow := func(i int) (*os.File, error) {
		_, f, err := cow.Make(ctx, cow.LayerDir(d.rc.StateDir, spec.ID, i), spec.ID, spec.Mounts[i], spec.Limits.DiskBytes,
			cow.IDMap{UID: workloadUID, GID: workloadGID})
		return f, err
	}
	given, mounts, err := pin(h.bundle, spec.Root, spec.Mounts, makeCow)
	if err != nil {
		return nil, nil, err
	}
	b.Mounts = mounts
	b.Rootfs = filepath.Join(h.bundle, "rootfs")
	if spec.Root == "" {
		var etc string
		if etc, err = d.etcSnapshot(); err != nil {
			return nil, nil, err
		}
		b.Binds, err = composeRoot(b.Rootfs, etc)
		b.Hidden = hiddenUsr()
	} else {
		b.Binds, err = composeGivenRoot(b.Rootfs, given)
	}
	if err != nil {
		return nil, nil, err
	}
	if d.hier != nil {
		b.CgroupsPath = cgroupsPath(d.rc.CgroupParent, spec.ID)
		if err := h.makeCgroup(b.Host); err != nil {
			return nil, nil, err
		}
	}
	if err := writeSpec(filepath.Join(h.bundle, "config.json"), b.spec()); err != nil {
		return nil, nil, err
	}
	cfg := agentConfig(spec)
	if h.persistent {
		cfg.Listen = &agent.ListenConfig{Path: path.Join(sessionDir, sessionSock)}
	}
	if err := bd.Egress(cfg); err != nil {
		return nil, nil, err
	}
	if bd.Run != nil && !h.persistent {
		// A one-shot run's command: the agent starts it once the sandbox
		// is built, and the host attaches to it beside the handshake
		// (runsc passes the agent no socket of its own).
		cfg.Run = bd.Run
		h.run = &agent.Attaching{Attach: &agent.ExecAttach{ID: bd.Run.ID}, KeepInput: bd.Run.Stdin || bd.Run.PTY != nil, PTY: bd.Run.PTY != nil}
		bd.FollowRun(func(ctx context.Context, _ *agent.Client) (*agent.Exec, error) { return h.run.Open(ctx) }, h.run.Close)
	}
	client, agentLayers, err := h.start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	// runsc's gofer has its own copies of the pinned mounts now.
	if err := unpin(h.bundle); err != nil {
		client.Close()
		return nil, nil, err
	}
	if err := h.limitCPU(b.Host); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, append(hostLayers, agentLayers...), nil
}

// runscArgs are the global flags of every runsc call for this driver's
// sandboxes, those this runsc knows.
func (d *Driver) runscArgs() []string {
	args := []string{"--root=" + d.stateDir(), "--platform=" + d.platform, "--network=none"}
	if d.runsc.HasFlag("in-sandbox-cgroup") {
		// gVisor's own cgroup v2 file system: the agent gives every exec a
		// group there (see agent.ContainedConfig).
		args = append(args, "--in-sandbox-cgroup=v2")
	}
	if d.runsc.HasFlag("overlay2") {
		// The root is read-only and the writable places are tmpfs: no
		// overlay is wanted anywhere.
		args = append(args, "--overlay2=none")
	}
	if d.runsc.HasFlag("host-settings") {
		args = append(args, "--host-settings=ignore")
	}
	if d.rc.Persistent {
		// The agent listens on a socket it makes in the bundle's session
		// directory, bound in (and closed to the workload).
		args = append(args, "--host-uds=create")
	}
	// airlock starts runsc inside the sandbox's cgroup, which it made and
	// limited itself (see startInGroup); runsc leaves cgroups alone.
	args = append(args, "--ignore-cgroups")
	return args
}

// runscCmd runs one runsc command for the sandbox id (kill, delete…),
// within timeout.
func (d *Driver) runscCmd(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.runsc.Path, append(d.runscArgs(), args...)...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("runsc %s: %w: %s", strings.Join(args, " "), err, lastLine(string(out)))
	}
	return string(out), nil
}

func (d *Driver) bundlesDir() string { return filepath.Join(d.rc.StateDir, "gvisor", "bundles") }
func (d *Driver) stateDir() string   { return filepath.Join(d.rc.StateDir, "gvisor", "state") }

// Sweep removes what the gVisor sandboxes of airlock processes that died
// without cleaning up left behind: runsc's state and processes, bundles and
// cgroups. A sandbox is stale when no live process holds its lock (the lock
// of a live native sandbox is held too, so it is spared).
func (d *Driver) Sweep(context.Context) error {
	if d.runsc == nil {
		return nil
	}
	ents, _ := os.ReadDir(d.bundlesDir())
	var ids []string
	for _, ent := range ents {
		// A paused sandbox's bundle is kept for its resume (Discard
		// removes it).
		if _, err := os.Stat(filepath.Join(d.bundlesDir(), ent.Name(), pausedMark)); err != nil {
			ids = append(ids, ent.Name())
		}
	}
	return hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
		h := &host{d: d, spec: sandbox.Spec{ID: id}, bundle: filepath.Join(d.bundlesDir(), id)}
		if d.hier != nil {
			h.group = d.hier.Open(d.rc.CgroupParent + "/" + id)
		}
		d.rc.Logger.Info("removing a stale gVisor sandbox", "sandbox_id", id)
		h.teardown()
		return nil
	})
}

// unsupported says why this host cannot run gVisor sandboxes, and how to
// make it.
func unsupported(why, fix string) error {
	return &sandbox.UnsupportedError{What: "gvisor", Why: why, Fix: fix}
}

// lastLine returns the last non-empty line of s, usually the error.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}
