package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver runs sandboxes as containers of a Docker Engine.
type Driver struct {
	opts Options
	rc   *agentdriver.Recipe

	cliOnce sync.Once
	cli     *client.Client
	cliErr  error

	mu       sync.Mutex
	info     *engineInfo // what the engine said about itself, once it answered
	agentVol string      // the agent's volume, once it is filled
	// pulls are the engine's pulls that creates wait for, by sandbox id.
	pulls map[string]*enginePull

	hierOnce sync.Once
	hier     *cgroup.Hierarchy // this host's cgroups; nil without
}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Describer = (*Driver)(nil)
)

// New returns a Docker driver. It does no I/O: the engine is first asked
// by Probe or Create.
func New(opts Options) (*Driver, error) {
	if opts.Runtime == "" {
		opts.Runtime = DefaultRuntime
	}
	if opts.Instance == "" {
		name, _ := os.Hostname()
		opts.Instance = RunInstance(name)
	}
	d := &Driver{opts: opts}
	var err error
	if d.rc, err = agentdriver.NewRecipe("docker", opts.shared(), false, d.Sweep); err != nil {
		return nil, err
	}
	d.rc.SweepBeside = true
	return d, nil
}

// Name is "docker".
func (d *Driver) Name() string { return "docker" }

// Instance is the label airlock.daemon of the containers this driver makes.
func (d *Driver) Instance() string { return d.opts.Instance }

// client returns the engine's client, made on first use.
func (d *Driver) client() (*client.Client, error) {
	d.cliOnce.Do(func() {
		var opt client.Opt = client.FromEnv
		if d.opts.Host != "" {
			opt = client.WithHost(d.opts.Host)
		}
		d.cli, d.cliErr = client.New(opt) // it negotiates the API version down to the engine's
		if d.cliErr != nil {
			d.cliErr = unsupported(fmt.Sprintf("the engine's address: %v", d.cliErr), "set DOCKER_HOST to unix:///path/docker.sock or tcp://host:port")
		}
	})
	return d.cli, d.cliErr
}

// Client is the driver's engine client, for tests and tools that look at
// what the driver made.
func (d *Driver) Client() (*client.Client, error) { return d.client() }

// engineInfo is what the engine says about itself.
type engineInfo struct {
	Host           string
	Version        string
	API            string
	OS, Arch       string
	Runtimes       []string
	DefaultRuntime string
	CgroupVersion  string
}

// engine asks the engine about itself, once it answers.
func (d *Driver) engine(ctx context.Context) (*engineInfo, error) {
	d.mu.Lock()
	info := d.info
	d.mu.Unlock()
	if info != nil {
		return info, nil
	}
	cli, err := d.client()
	if err != nil {
		return nil, err
	}
	r, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		fix := "start the engine (dockerd), or point DOCKER_HOST at one"
		if errors.Is(err, os.ErrPermission) {
			fix = "run airlock as root, or as a member of the docker group"
		}
		return nil, unsupported(fmt.Sprintf("cannot reach the Docker engine at %s: %v", cli.DaemonHost(), err), fix)
	}
	in := r.Info
	info = &engineInfo{
		Host: cli.DaemonHost(), Version: in.ServerVersion, API: cli.ClientVersion(),
		OS: in.OSType, Arch: in.Architecture, DefaultRuntime: in.DefaultRuntime, CgroupVersion: in.CgroupVersion,
	}
	for name := range in.Runtimes {
		info.Runtimes = append(info.Runtimes, name)
	}
	sort.Strings(info.Runtimes)
	d.mu.Lock()
	d.info = info
	d.mu.Unlock()
	return info, nil
}

// goArch is the engine's architecture as Go names it.
func goArch(uname string) string {
	switch uname {
	case "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	}
	return uname
}

// probeTimeout bounds Probe's questions to the engine.
var probeTimeout = 10 * time.Second

// Probe checks that the engine answers, runs Linux containers of this
// machine's architecture (the agent's), and has the default runtime.
func (d *Driver) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := d.engine(ctx)
	if err != nil {
		return err
	}
	if info.OS != "linux" || goArch(info.Arch) != goruntime.GOARCH {
		return unsupported(fmt.Sprintf("the engine at %s runs %s/%s containers; airlock's agent is linux/%s", info.Host, info.OS, goArch(info.Arch), goruntime.GOARCH),
			"use an engine on a Linux host of the same architecture")
	}
	return d.checkRuntime(info, d.opts.Runtime)
}

// checkRuntime says whether the engine has runtime.
func (d *Driver) checkRuntime(info *engineInfo, runtime string) error {
	if slices.Contains(info.Runtimes, runtime) {
		return nil
	}
	return &sandbox.UnsupportedError{
		What: "docker runtime " + runtime,
		Why:  fmt.Sprintf("the engine at %s has the runtimes %s", info.Host, strings.Join(info.Runtimes, ", ")),
		Fix:  fmt.Sprintf("register it with the engine (dockerd --add-runtime %s=/path/to/binary, or \"runtimes\" in daemon.json) and restart the engine, or pick one of those", runtime),
	}
}

// Describe says which engine the driver uses, as Probe found it.
func (d *Driver) Describe() string {
	d.mu.Lock()
	info := d.info
	d.mu.Unlock()
	if info == nil {
		if cli, err := d.client(); err == nil {
			return "Docker engine at " + cli.DaemonHost() + " (not reached)"
		}
		return "no Docker engine"
	}
	return fmt.Sprintf("Docker Engine %s (API %s, cgroup v%s) at %s; runtimes %s, default for sandboxes %s",
		info.Version, info.API, info.CgroupVersion, info.Host, strings.Join(info.Runtimes, ", "), d.opts.Runtime)
}

// Capabilities says what Docker sandboxes can do. The languages are those
// of the image; the suite's image has sh, bash and python3.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true,
		Egress: true, HostMounts: true, PTY: true, Snapshots: true, SurvivesRestart: d.rc.Persistent, Home: true,
		Images: true, NeedsImage: d.opts.Image == "",
		Lacks: map[sandbox.Capability]sandbox.Lack{
			sandbox.CapHostRoot:     {Why: "the docker driver runs images, not a root directory of the host", Fix: "name an image instead (--image NAME, or image in the template)"},
			sandbox.CapDefaultImage: {Why: "the docker driver needs an image the engine has", Fix: "give --image NAME (or image in the template); `docker images` lists them"},
		},
	}
}

// hierarchy returns this host's cgroups, where the host has them.
func (d *Driver) hierarchy() *cgroup.Hierarchy {
	d.hierOnce.Do(func() { d.hier, _ = cgroup.Detect() })
	return d.hier
}

// Create starts a sandbox: its container, the agent over the attach
// stream, and the handshake. Anything made before an error is removed
// again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return d.rc.Create(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Defaults: d.defaults, Start: d.start})
}

// defaults fills in the image and the runtime of spec, and refuses what the
// engine cannot run (a root directory CheckSpec refuses, from the driver's
// capabilities).
func (d *Driver) defaults(_ context.Context, spec *sandbox.Spec) error {
	if err := contained.Defaults(spec, d.opts.Image, d.opts.Runtime,
		"the docker driver needs an image the engine has: give --image NAME (or image in the template); `docker images` lists them"); err != nil {
		return err
	}
	if err := d.checkMounts(spec.Mounts); err != nil {
		return err
	}
	if _, err := d.client(); err != nil {
		return err
	}
	// The engine is asked about itself (its runtimes) only once something
	// fails: a start asks it nothing it does not need.
	d.mu.Lock()
	info := d.info
	d.mu.Unlock()
	if info != nil {
		return d.checkRuntime(info, spec.Runtime)
	}
	return nil
}

// start is Create's own part: the container and the agent's handshake.
func (d *Driver) start(ctx context.Context, b *agentdriver.Build) (*agent.Client, []sandbox.Layer, error) {
	spec := b.Spec
	cli := d.cli
	h := newHost(d, spec, b.Lock)
	b.Host(h)
	img, err := cli.ImageInspect(ctx, spec.Image)
	if cerrdefs.IsNotFound(err) {
		// Not there: the engine pulls it, as `docker run` would.
		if perr := d.pull(ctx, spec.ID, spec.Image); perr != nil {
			return nil, nil, fmt.Errorf("image %q: %w: the engine at %s does not have it, and could not pull it (%w); push it to a registry the engine reaches, or build or load it (docker build, docker load) and name it as `docker images` shows it", spec.Image, sandbox.ErrNotFound, cli.DaemonHost(), perr)
		}
		img, err = cli.ImageInspect(ctx, spec.Image)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, nil, fmt.Errorf("image %q: %w: the engine at %s does not have it; build or load it first (docker build, docker load, docker import) and name it as `docker images` shows it", spec.Image, sandbox.ErrNotFound, cli.DaemonHost())
		}
		if _, ierr := d.engine(ctx); ierr != nil {
			return nil, nil, ierr // the engine does not answer: say so, and how to fix it
		}
		return nil, nil, fmt.Errorf("look at image %q: %w", spec.Image, err)
	}
	if img.Os != "" && img.Os != "linux" {
		return nil, nil, fmt.Errorf("%w: image %q is for %s; the sandbox needs a Linux image", sandbox.ErrInvalid, spec.Image, img.Os)
	}
	vol, err := d.agentVolume(ctx, spec.Image)
	if err != nil {
		return nil, nil, err
	}
	var imageEnv []string
	workDir := ""
	if img.Config != nil {
		imageEnv, workDir = img.Config.Env, img.Config.WorkingDir
	}
	cfg := agentConfig(spec, spec.Runtime, imageEnv, workDir, d.rc.Persistent)
	if err := b.Egress(cfg); err != nil {
		return nil, nil, err
	}
	cs := containerSpec{Spec: spec, Image: spec.Image, Runtime: spec.Runtime, Instance: d.opts.Instance, AgentVolume: vol, Persistent: d.rc.Persistent}
	cl, agentLayers, err := h.start(ctx, cs, cfg)
	if err != nil {
		return nil, nil, err
	}
	return cl, append(h.layers(), agentLayers...), nil
}

// unsupported says why this host cannot run Docker sandboxes, and how to
// make it.
func unsupported(why, fix string) error {
	return &sandbox.UnsupportedError{What: "docker", Why: why, Fix: fix}
}

// agentSum is the agent's checksum, and the path of its binary.
func agentSum() (path, sum string, err error) {
	if path, err = agentbin.Path(); err != nil {
		return "", "", err
	}
	sum, err = agentbin.Sum()
	return path, sum, err
}

// checkMounts refuses a mount whose source is, or passes through, a
// symlink, where the engine runs on this host and so sees the same paths.
// (The engine resolves the source again when it mounts it: a source
// swapped for a symlink after this check is followed; see decisions.)
func (d *Driver) checkMounts(mounts []sandbox.Mount) error {
	cli, err := d.client()
	if err != nil || !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return nil
	}
	for _, m := range mounts {
		real, err := filepath.EvalSymlinks(m.Source)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mount source %s: %w: it does not exist on this host", m.Source, sandbox.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("mount source %s: %w", m.Source, err)
		}
		if real != filepath.Clean(m.Source) {
			return fmt.Errorf("%w: mount source %s leads through a symlink (to %s): give the real path", sandbox.ErrInvalid, m.Source, real)
		}
	}
	return nil
}
