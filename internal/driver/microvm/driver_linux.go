package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Sizes of a machine beyond its sandbox's limits.
const (
	// guestReserveMiB is the guest's RAM beyond the workload's memory
	// limit: its kernel, the agent, the page cache of the root disk. The
	// guest's RAM is rounded up to guestRAMStepMiB, so that sandboxes of
	// nearby limits share one snapshot.
	guestReserveMiB = 128
	guestRAMStepMiB = 128
	// qemuOverheadMiB is the host memory QEMU takes beyond the guest's
	// RAM: its own heap and, emulating, its translation cache.
	qemuOverheadMiB    = 128
	qemuOverheadTCGMiB = qemuOverheadMiB + tcgCacheMiB
	// qemuPids bounds QEMU's threads: one per vCPU, its I/O workers and
	// helpers.
	qemuPids = 256
)

// Driver runs sandboxes in QEMU microVMs.
type Driver struct {
	opts    Options
	rc      *agentdriver.Recipe
	vmm     vmm
	vmmErr  error
	hier    *cgroup.Hierarchy
	hierErr error
	cache   string

	// The accelerator and the host's TSC rate are found on first use:
	// every airlock that lists its drivers makes this one.
	accelOnce sync.Once
	accel     string
	accelWhy  string // why not KVM, when TCG
	tscKHz    int64

	mu    sync.Mutex
	snaps map[string]*snapshot // by key, loaded
	// forks holds the memory of live forks' checkpoints that clones map
	// copy-on-write, by directory, until ReleaseCheckpoint
	// (livefork_linux.go).
	forks map[string]*os.File
	// built remembers the initramfs and root images found or built, by
	// what they were made from (see shapeFor): their keys take reading
	// the kernel's modules and the package database.
	built map[string]any
}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Describer = (*Driver)(nil)
)

// New returns a microvm driver. It fails only when the agent binary cannot
// be found; what the host lacks (QEMU, the guest kernel, root, cgroups) is
// reported by Probe and Create. Without Options.Accel it probes /dev/kvm
// (a few milliseconds).
func New(opts Options) (*Driver, error) {
	if opts.Packages == nil {
		opts.Packages = DefaultPackages
	}
	if opts.BootAttempts <= 0 {
		opts.BootAttempts = 3
	}
	d := &Driver{opts: opts, cache: cacheRoot(opts.CacheDir), snaps: map[string]*snapshot{}, forks: map[string]*os.File{}, built: map[string]any{}}
	var err error
	if d.rc, err = agentdriver.NewRecipe("microvm", opts.shared(), true, d.Sweep); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := findQEMU(ctx, opts.QEMU)
	if err != nil {
		d.vmmErr = err
	} else {
		d.vmm = q
	}
	switch opts.Accel {
	case "", "kvm", "tcg":
	default:
		return nil, fmt.Errorf("microvm: accelerator %q: use kvm or tcg: %w", opts.Accel, sandbox.ErrInvalid)
	}
	d.hier, d.hierErr = cgroup.Detect()
	return d, nil
}

// accelerator returns "kvm" or "tcg": Options.Accel, else KVM where
// /dev/kvm really runs a guest. It settles the boot timeout and, for TCG,
// measures the host's TSC rate.
func (d *Driver) accelerator() string {
	d.accelOnce.Do(func() {
		d.accel = d.opts.Accel
		if d.accel == "" {
			d.accel = "tcg"
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if r := hostcap.Probe(ctx, "kvm"); r.OK {
				d.accel = "kvm"
			} else {
				d.accelWhy = r.Why
				if r.Fix != "" {
					d.accelWhy += "; for KVM speed: " + r.Fix
				}
			}
		}
		if d.opts.BootTimeout <= 0 {
			d.opts.BootTimeout = 60 * time.Second
			if d.accel == "kvm" {
				d.opts.BootTimeout = 10 * time.Second
			}
		}
		if d.accel == "tcg" {
			d.tscKHz = d.hostTSC()
		}
	})
	return d.accel
}

// Name is "microvm".
func (d *Driver) Name() string { return "microvm" }

// Describe says which VMM, accelerator and kernel the driver uses, and
// what the host needs for KVM speed when it emulates.
func (d *Driver) Describe() string {
	if d.vmm == nil {
		return "no QEMU"
	}
	s := d.vmm.Name() + " -M microvm, accel " + d.accelerator()
	if k, err := currentKernel(d.cache); err == nil {
		s += ", kernel " + k.Release
	}
	if d.accel == "tcg" {
		s += " (software emulation, about 10x slower than KVM"
		if d.accelWhy != "" {
			s += ": " + d.accelWhy
		}
		s += ")"
	}
	return s
}

// Probe checks that this host can run microVM sandboxes: amd64, root,
// cgroups, QEMU and the guest kernel in the cache.
func (d *Driver) Probe(ctx context.Context) error {
	_, err := d.layers()
	return err
}

// layers checks what the host must have and returns the host's layers in
// effect.
func (d *Driver) layers() ([]sandbox.Layer, error) {
	if runtime.GOARCH != "amd64" {
		return nil, unsupported("the microvm driver runs x86-64 guests (-M microvm) only; this is "+runtime.GOARCH, "use an amd64 host")
	}
	if os.Geteuid() != 0 {
		return nil, unsupported("the microvm driver needs root: it runs each QEMU as a uid of its own, in a cgroup it makes", "run airlock as root (sudo airlock …)")
	}
	if d.vmm == nil {
		return nil, unsupported(d.vmmErr.Error(), "apt-get install qemu-system-x86")
	}
	if _, err := currentKernel(d.cache); err != nil {
		return nil, err
	}
	on := []sandbox.Layer{sandbox.LayerMicroVM, sandbox.LayerUIDRange, sandbox.LayerPidNS, sandbox.LayerMountNS, sandbox.LayerUTSNS, sandbox.LayerIPCNS}
	if d.hier == nil {
		return nil, &sandbox.LayerError{Layer: sandbox.LayerCgroups, Why: d.hierErr.Error(), Fix: "mount the memory, pids, cpu, cpuacct and freezer cgroup v1 controllers, or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"}
	}
	on = append(on, sandbox.LayerCgroups)
	return on, nil
}

// Capabilities says what microVM sandboxes can do.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true,
		Egress: true, PTY: true, Snapshots: true, Home: true,
		// QEMU's migration of the whole machine to a file (pause_linux.go).
		Pause: true, LiveFork: true,
		// Spec.Root becomes a disk image; no host directory is ever
		// visible inside (the guest kernel has no 9p, Debian no virtiofsd).
		HostRoot: true, HostMounts: false,
		// An image's unpacked root, likewise (internal/image).
		Images: true, ImageRoot: true,
		Lacks: map[sandbox.Capability]sandbox.Lack{
			sandbox.CapHostMounts: {Why: "the guest sees no host directory: its kernel has no 9p and Debian has no virtiofsd", Fix: "copy files in with the file API, or use a driver with host_mounts (native, gvisor) for host mounts"},
		},
		// A sandbox ends with the process that made it: see
		// docs/decisions.md for what reattaching would take.
		SurvivesRestart: false,
	}
}

// guestMemoryMiB is the guest RAM for a workload memory limit.
func guestMemoryMiB(limit int64) int {
	mib := int((limit+(1<<20)-1)>>20) + guestReserveMiB
	return (mib + guestRAMStepMiB - 1) / guestRAMStepMiB * guestRAMStepMiB
}

// vcpus is the number of virtual CPUs for a CPU quota: whole CPUs, at
// least one, at most the host's.
func vcpus(cpus float64) int {
	return max(1, min(int(math.Ceil(cpus)), runtime.NumCPU()))
}

// cmdline is the guest kernel's command line: the console on the serial
// port (quiet), a panic or restart ends the machine, no PCI (microvm has
// none), the agent as init. An emulated guest is told the host's TSC
// rate, since calibrating it against emulated timers can hang the boot.
func (d *Driver) cmdline() string {
	args := []string{"console=ttyS0", "quiet", "panic=-1", "reboot=t", "pci=off", "rdinit=/init"}
	if d.accelerator() == "tcg" && d.tscKHz > 0 {
		args = append(args, "tsc_early_khz="+strconv.FormatInt(d.tscKHz, 10), "tsc=reliable")
	}
	args = append(args, d.opts.KernelArgs...)
	return strings.Join(append(args, "--", agent.GuestArg), " ")
}

// vmGroups are the supplementary groups QEMU needs: kvm's, to open
// /dev/kvm.
func (d *Driver) vmGroups() []uint32 {
	if d.accelerator() != "kvm" {
		return nil
	}
	g, err := user.LookupGroup("kvm")
	if err != nil {
		return nil
	}
	id, err := strconv.Atoi(g.Gid)
	if err != nil {
		return nil
	}
	return []uint32{uint32(id)}
}

// shapeFor finds (or builds) the kernel, initramfs and root of spec and
// returns the shape of its machine.
func (d *Driver) shapeFor(ctx context.Context, spec sandbox.Spec) (shape, error) {
	k, err := currentKernel(d.cache)
	if err != nil {
		return shape{}, err
	}
	// An initramfs is made of an unpacked kernel and an agent binary, both
	// named by their version; it is the same for as long as they are.
	ird, err := memo(d, "initramfs\x00"+k.Dir+"\x00"+d.rc.Agent, func() (*initramfs, error) {
		return buildInitramfs(ctx, d.cache, k, d.rc.Agent)
	})
	if err != nil {
		return shape{}, err
	}
	// A root image is the same while what it is made of looks the same.
	fp, err := rootFingerprint(spec.Root)
	if err != nil {
		return shape{}, err
	}
	root, err := memo(d, "root\x00"+spec.Root+"\x00"+fp, func() (*rootImage, error) {
		return buildRootImage(ctx, d.cache, d.opts.Packages, spec.Root)
	})
	if err != nil {
		return shape{}, err
	}
	touch(filepath.Dir(ird.Path))
	touch(filepath.Dir(root.Path))
	touch(k.Dir)
	return shape{
		Accel: d.accelerator(), VCPUs: vcpus(spec.Limits.CPUs), MemoryMiB: guestMemoryMiB(spec.Limits.MemoryBytes),
		Kernel: k, Initramfs: ird, Root: root, Cmdline: d.cmdline(),
	}, nil
}

// Create starts a sandbox: a machine restored from its shape's snapshot
// (made first when there is none) or booted, in the sandbox's host cgroup,
// then the sandbox's config and identity, then the agent's handshake.
// Anything made before an error is removed again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return d.rc.Create(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Start: d.start})
}

// start is Create's own part: the machine, its cgroup and the agent's
// handshake.
func (d *Driver) start(ctx context.Context, b *agentdriver.Build) (_ *agent.Client, _ []sandbox.Layer, err error) {
	spec := b.Spec
	hostLayers, err := d.layers()
	if err != nil {
		return nil, nil, err
	}
	h := &host{d: d, spec: spec, lock: b.Lock, created: time.Now(), hostLayers: hostLayers}
	b.Host(h)
	if h.uidLock, h.uid, err = hostlock.UIDRange(d.rc.StateDir); err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	s, err := d.shapeFor(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	if err := h.makeCgroup(s); err != nil {
		return nil, nil, err
	}
	cfg := d.agentConfig(spec)
	if err := b.Egress(cfg); err != nil {
		return nil, nil, err
	}
	t2 := time.Now()
	if err := h.start(ctx, s); err != nil {
		return nil, nil, err
	}
	t3 := time.Now()
	client, agentLayers, err := h.handshake(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	d.rc.Logger.Debug("microVM sandbox started", "sandbox_id", spec.ID, "restored", h.Restored,
		"assets", t1.Sub(t0), "cgroup", t2.Sub(t1), "machine", t3.Sub(t2), "agent", time.Since(t3))
	if err := h.limitCPU(); err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, append(hostLayers, agentLayers...), nil
}

// agentConfig is the agent's config for spec, with the guest's part: a
// fresh seed, machine id and host name, the clock, and the workload's
// limits.
func (d *Driver) agentConfig(spec sandbox.Spec) *agent.Config {
	seed := make([]byte, 64)
	_, _ = rand.Read(seed)
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	l := spec.Limits
	return &agent.Config{
		Hostname: spec.ID, DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: workloadUID, GID: workloadGID, Env: spec.Env, OpenFiles: l.OpenFiles,
		FileSize: l.DiskBytes, Home: spec.Home,
		Guest: &agent.GuestConfig{
			Seed: seed, MachineID: hex.EncodeToString(id),
			MemoryBytes: l.MemoryBytes, Pids: l.Pids,
		},
	}
}

// Sweep removes what sandboxes of airlock processes that died without
// cleaning up left behind: their QEMU processes (in their cgroups) and
// cgroups. A sandbox is stale when no live process holds its lock.
func (d *Driver) Sweep(context.Context) error {
	d.rc.SweepCgroups(d.hier, os.Getpid())
	return nil
}

// unsupported says why this host cannot run microVM sandboxes, and how to
// make it.
func unsupported(why, fix string) error {
	return &sandbox.UnsupportedError{What: "microvm", Why: why, Fix: fix}
}

// memo returns what d built for key already, or builds it with build and
// remembers it.
func memo[T any](d *Driver, key string, build func() (T, error)) (T, error) {
	d.mu.Lock()
	v, ok := d.built[key].(T)
	d.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return v, err
	}
	d.mu.Lock()
	d.built[key] = v
	d.mu.Unlock()
	return v, nil
}

// hostTSC returns the host's TSC rate in kHz, measured once per boot of
// the host and kept in the cache: every airlock process then gives its
// guests the same figure, and their kernel command line (and with it the
// snapshot's key) stays the same. A measurement differs from the next in
// the last digits.
func (d *Driver) hostTSC() int64 {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return tscKHz()
	}
	boot := strings.TrimSpace(string(b))
	path := filepath.Join(d.cache, "tsc-khz")
	if b, err := os.ReadFile(path); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == boot {
			if k, err := strconv.ParseInt(f[1], 10, 64); err == nil && k > 0 {
				return k
			}
		}
	}
	k := tscKHz()
	if k > 0 && os.MkdirAll(d.cache, 0o755) == nil {
		tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
		if os.WriteFile(tmp, []byte(boot+" "+strconv.FormatInt(k, 10)+"\n"), 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return k
}
