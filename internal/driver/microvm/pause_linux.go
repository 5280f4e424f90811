package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Pause and resume with memory: QEMU's migration of the whole machine
// (its RAM, which holds the sandbox's files too: /workspace and /tmp are
// the guest's tmpfs; the root disk is read-only and the cache's) to one
// file of the pause directory; the resume is a new QEMU started with
// -incoming from that file. Before the save the agent suspends its
// session (agent.ProcSuspend) and afterwards takes a new one from the
// resumed machine's host, setting the guest's clock and entropy from it
// (agent/suspend.go). Nothing is kept outside the directory: a paused
// microVM sandbox survives the daemon that paused it.

var _ sandbox.Pauser = (*Driver)(nil)

// pauseImage is the machine's saved state in a pause directory.
const pauseImage = "machine"

// pausedVersion changes whenever what a pause saves changes.
const pausedVersion = 1

// pausedState is what Resume needs of a paused sandbox: the sandbox, the
// machine it ran as (the image loads only into the same machine), and the
// token its agent waits for.
type pausedState struct {
	Version int          `json:"version"`
	Spec    sandbox.Spec `json:"spec"`
	// Ran is how long it ran before the pause: its lifetime goes on from
	// there.
	Ran   time.Duration `json:"ran"`
	Token string        `json:"token"`
	// The machine: the VMM that saved it, its accelerator, CPUs, RAM
	// (whether it was a memory backend's, as restored machines' is), the
	// kernel, its restore stub, the root disk and command line.
	VMM        string `json:"vmm"`
	Accel      string `json:"accel"`
	VCPUs      int    `json:"vcpus"`
	MemoryMiB  int    `json:"memory_mib"`
	RAMBackend bool   `json:"ram_backend"`
	Kernel     string `json:"kernel"`
	StubKernel string `json:"stub_kernel"`
	StubInitrd string `json:"stub_initrd"`
	RootImage  string `json:"root_image"`
	Cmdline    string `json:"cmdline"`
	// Plain says the image was saved without x-ignore-shared: a live
	// fork's checkpoint, which a loader takes into a shared RAM file
	// (livefork_linux.go). A pause's never is.
	Plain bool `json:"plain,omitempty"`
}

// migrateTimeout bounds one save of a machine.
var migrateTimeout = 10 * time.Minute

// Pause saves the sandbox in into dir and ends it.
func (d *Driver) Pause(ctx context.Context, in sandbox.Instance, dir string) ([]byte, sandbox.Instance, error) {
	ai, h, err := microHost(in)
	if err != nil {
		return nil, in, err
	}
	st, err := d.save(ctx, h, dir, false)
	if err != nil {
		if !st.suspended {
			return nil, in, fmt.Errorf("pause %s: %w", h.spec.ID, err)
		}
		// The agent waits for a resume: the machine runs on from where
		// it stopped, with a new session.
		back, rerr := d.runOn(ctx, ai, h, st.Token)
		if rerr != nil {
			_ = in.Close(context.WithoutCancel(ctx))
			return nil, nil, fmt.Errorf("pause %s: %w; and the sandbox was lost going on: %w", h.spec.ID, err, rerr)
		}
		return nil, back, fmt.Errorf("pause %s: %w", h.spec.ID, err)
	}
	// The save is complete: a daemon that dies before the supervisor
	// records it finds it (Paused).
	raw := mustJSON(st.pausedState)
	if err := d.markPaused(h.spec.ID, raw); err != nil {
		d.rc.Logger.Warn("mark the microVM saved", "sandbox_id", h.spec.ID, "err", err)
	}
	if err := pinProducts(h.spec.ID, st.StubKernel, st.StubInitrd, st.RootImage); err != nil {
		d.rc.Logger.Warn("pin the paused microVM's kernel and root image in the cache", "sandbox_id", h.spec.ID, "err", err)
	}
	// QEMU, its cgroup and the locks go; the machine is in dir.
	if err := in.Close(context.WithoutCancel(ctx)); err != nil {
		d.rc.Logger.Warn("end the paused microVM", "sandbox_id", h.spec.ID, "err", err)
	}
	return raw, nil, nil
}

var _ sandbox.PauseFinder = (*Driver)(nil)

// pausedMark is the file that says sandbox id's machine was saved
// completely, with its paused state; it goes with a resume or a discard.
func (d *Driver) pausedMark(id string) string {
	return filepath.Join(d.rc.StateDir, "microvm-paused", id)
}

func (d *Driver) markPaused(id string, raw []byte) error {
	path := d.pausedMark(id)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Paused finds sandbox id saved by a process that died before its pause
// was recorded: its QEMU died with that process, and the mark says the
// save was complete. Without the mark the save was not (and the sandbox
// died with its QEMU).
func (d *Driver) Paused(_ context.Context, id string, _ []byte) ([]byte, bool) {
	if !sandbox.ValidID(id) {
		return nil, false
	}
	raw, err := os.ReadFile(d.pausedMark(id))
	var st pausedState
	if err != nil || json.Unmarshal(raw, &st) != nil || st.Spec.ID != id {
		return nil, false
	}
	return raw, true
}

// saved is a save's outcome: the paused state, and whether the agent was
// suspended (and so waits for a resume line).
type saved struct {
	pausedState
	suspended bool
}

// save suspends the agent's session and saves h's machine to dir, where
// it stays stopped; plain saves it without x-ignore-shared.
func (d *Driver) save(ctx context.Context, h *host, dir string, plain bool) (saved, error) {
	s := h.shape
	st := saved{pausedState: pausedState{
		Version: pausedVersion, Spec: h.spec, Ran: time.Since(h.created), Token: newToken(),
		VMM: d.vmm.Name(), Accel: s.Accel, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB, RAMBackend: h.Restored,
		Kernel: s.Kernel.Package + " " + s.Kernel.Version, RootImage: s.Root.Path, Cmdline: s.Cmdline,
		Plain: plain,
	}}
	if h.vm == nil || h.client == nil {
		return st, errors.New("the machine is not running")
	}
	stub, err := buildRestoreStub(ctx, d.cache, s.Kernel)
	if err != nil {
		return st, err
	}
	st.StubKernel, st.StubInitrd = stub.Kernel, stub.Initramfs
	out, err := os.OpenFile(filepath.Join(dir, pauseImage), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return st, err
	}
	defer out.Close()
	if err := h.client.Suspend(ctx, st.Token); err != nil {
		if errors.Is(err, agent.ErrUnsupportedSuspend) {
			return st, &sandbox.UnsupportedError{What: "pause", Why: err.Error(), Fix: "make a new sandbox: its agent is this airlock's"}
		}
		return st, err
	}
	st.suspended = true
	mctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if err := d.vmm.Migrate(mctx, h.vm, out, plain); err != nil {
		return st, fmt.Errorf("save the machine: %w", err)
	}
	if err := out.Sync(); err != nil {
		return st, fmt.Errorf("save the machine: %w", err)
	}
	return st, nil
}

// runOn lets h's machine, stopped or not by a save, run on, and gives
// ai the new session of its agent (which waits for token).
func (d *Driver) runOn(ctx context.Context, ai *agentdriver.Instance, h *host, token string) (sandbox.Instance, error) {
	ctx = context.WithoutCancel(ctx)
	if err := d.vmm.Cont(ctx, h.vm); err != nil {
		return nil, err
	}
	h.client.Close()
	client, _, err := h.rejoin(ctx, token, &agent.GuestRefresh{Seed: newSeed()})
	if err != nil {
		return nil, err
	}
	h.client = client
	ai.Rebind(client)
	return ai, nil
}

// rejoin sends the agent of h's machine, which waits for token, the
// resume line with ref and the host's clock, and performs the handshake
// of a new session on the port.
func (h *host) rejoin(ctx context.Context, token string, ref *agent.GuestRefresh) (*agent.Client, []sandbox.Layer, error) {
	dctx, cancel := context.WithTimeout(ctx, h.d.opts.BootTimeout)
	defer cancel()
	port := h.vm.Agent
	stop := context.AfterFunc(dctx, func() { _ = port.SetDeadline(time.Now()) })
	ref.TimeUnixNano = time.Now().UnixNano()
	err := agent.WriteResume(port, token, ref)
	if err == nil {
		err = agent.AwaitResumed(port, token, 1<<20)
	}
	if !stop() || err != nil {
		if err == nil {
			err = dctx.Err()
		}
		return nil, nil, h.startError(fmt.Errorf("resume the agent's session: %w", err))
	}
	_ = port.SetDeadline(time.Time{})
	h.sess = agent.NewSession(port, &h.wmu)
	stop = context.AfterFunc(dctx, func() { _ = port.Close() })
	defer stop()
	client, layers, err := agent.Dial(dctx, h.sess)
	if err != nil {
		return nil, nil, h.startError(err)
	}
	h.client = client
	return client, layers, nil
}

// Resume starts paused sandbox id from dir: a new QEMU of the same
// machine, in a new host cgroup, loads it, and its agent takes a new
// session with the host's clock and fresh entropy.
func (d *Driver) Resume(ctx context.Context, id string, raw []byte, dir string) (_ sandbox.Instance, err error) {
	var st pausedState
	if err := json.Unmarshal(raw, &st); err != nil || st.Spec.ID != id || !sandbox.ValidID(id) || st.Token == "" {
		return nil, fmt.Errorf("resume %s: %w: its paused state does not name it", id, sandbox.ErrInvalid)
	}
	h, err := d.load(ctx, st, dir)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", id, err)
	}
	h.created = time.Now().Add(-st.Ran)
	in, err := h.finish(ctx, st, &agent.GuestRefresh{Seed: newSeed()}, h.created)
	if err == nil {
		_ = os.Remove(d.pausedMark(id))
		unpinProducts(id, st.StubKernel, st.StubInitrd, st.RootImage)
	}
	return in, err
}

// load starts the machine that st and dir saved, for st.Spec, and
// returns its host (Teardown removes what it made).
func (d *Driver) load(ctx context.Context, st pausedState, dir string) (*host, error) {
	return d.loadFrom(ctx, st, loadHow{Image: filepath.Join(dir, pauseImage)})
}

// loadHow is what loadFrom starts a machine from: the image, and, when
// set, its RAM file (else its memory is anonymous, or QEMU's own).
type loadHow struct {
	// Image is the saved machine: a whole one, or its devices alone when
	// RAM holds its memory.
	Image string
	// RAM is mapped copy-on-write (a clone of a shared checkpoint, as a
	// snapshot's machine), or shared when RAMShared (a checkpoint's
	// loader: QEMU writes it); Hold leaves the machine stopped once
	// loaded.
	RAM             *os.File
	RAMShared, Hold bool
}

// loadFrom starts the machine that st saved, as how says, for st.Spec,
// and returns its host (Teardown removes what it made).
func (d *Driver) loadFrom(ctx context.Context, st pausedState, how loadHow) (_ *host, err error) {
	switch {
	case st.Version != pausedVersion:
		return nil, fmt.Errorf("%w: the image is of another airlock's pause (version %d, this one's %d)", sandbox.ErrInvalid, st.Version, pausedVersion)
	case d.vmm == nil:
		return nil, unsupported(d.vmmErr.Error(), "apt-get install qemu-system-x86")
	case st.VMM != d.vmm.Name() || st.Accel != d.accelerator():
		return nil, &sandbox.UnsupportedError{What: "resume", Why: fmt.Sprintf("the machine was saved by %s with %s; this host runs %s with %s", st.VMM, st.Accel, d.vmm.Name(), d.accelerator()), Fix: "resume it on a host with the same QEMU and accelerator"}
	}
	for _, f := range []string{st.StubKernel, st.StubInitrd, st.RootImage} {
		if _, err := os.Stat(f); err != nil {
			// Not the path: errors reach the API.
			return nil, fmt.Errorf("%w: the machine's restore stub or root image is gone from the cache (%s)", sandbox.ErrNotFound, filepath.Base(f))
		}
	}
	hostLayers, err := d.layers()
	if err != nil {
		return nil, err
	}
	img, err := os.Open(how.Image)
	if err != nil {
		return nil, fmt.Errorf("open the saved machine: %w", err)
	}
	defer img.Close()
	lock, err := hostlock.Sandbox(d.rc.StateDir, st.Spec.ID)
	if err != nil {
		return nil, err
	}
	h := &host{d: d, spec: st.Spec, lock: lock, hostLayers: hostLayers}
	defer func() {
		if err != nil {
			_ = h.Teardown(context.WithoutCancel(ctx))
		}
	}()
	if h.uidLock, h.uid, err = hostlock.UIDRange(d.rc.StateDir); err != nil {
		return h, err
	}
	if err := h.makeCgroup(shape{Accel: st.Accel, MemoryMiB: st.MemoryMiB}); err != nil {
		return h, err
	}
	m := &machine{
		Accel: st.Accel, VCPUs: st.VCPUs, MemoryMiB: st.MemoryMiB,
		Kernel: st.StubKernel, Initramfs: st.StubInitrd, Cmdline: st.Cmdline, RootImage: st.RootImage,
		State: img, StatePlain: st.Plain, Cont: !how.Hold, Hold: how.Hold,
		UID: h.uid, GID: h.uid, Groups: d.vmGroups(), Group: h.group,
	}
	// The memory a snapshot's machine ran on was a backend's: the image
	// loads into one of the same name, of anonymous memory, or of how's
	// file.
	m.AnonRAM = st.RAMBackend && how.RAM == nil
	if how.RAM != nil {
		m.RAM, m.RAMShared = how.RAM, how.RAMShared
		// QEMU opens it again (/dev/fd/N), as its uid, to map it: memory
		// it writes is made its uid's.
		if how.RAMShared {
			if err := how.RAM.Chown(h.uid, h.uid); err != nil {
				return h, err
			}
		}
	}
	h.console = &agentdriver.LogBuffer{}
	m.Console = h.console
	v, err := d.vmm.Start(ctx, m)
	if err != nil {
		return h, fmt.Errorf("load the saved machine: %w%s", err, consoleTail(h.console))
	}
	h.vm, h.Restored = v, st.RAMBackend
	h.shape = shape{Accel: st.Accel, VCPUs: st.VCPUs, MemoryMiB: st.MemoryMiB, Cmdline: st.Cmdline}
	go h.wait()
	return h, nil
}

// finish takes up the agent of h's loaded machine with ref and returns
// the sandbox, made at created.
func (h *host) finish(ctx context.Context, st pausedState, ref *agent.GuestRefresh, created time.Time) (_ sandbox.Instance, err error) {
	defer func() {
		if err != nil {
			_ = h.Teardown(context.WithoutCancel(ctx))
		}
	}()
	client, agentLayers, err := h.rejoin(ctx, st.Token, ref)
	if err != nil {
		return nil, err
	}
	if err := h.limitCPU(); err != nil {
		client.Close()
		return nil, err
	}
	return agentdriver.NewReattached(agentdriver.Config{
		Spec: h.spec, Client: client, Layers: append(h.hostLayers, agentLayers...), Host: h, Logger: h.d.rc.Logger,
	}, h.d.rc.Egress, created)
}

// Discard forgets paused sandbox id: the driver keeps nothing of it
// outside its directory but its mark.
func (d *Driver) Discard(_ context.Context, id string, raw []byte) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("discard %q: %w", id, sandbox.ErrInvalid)
	}
	var st pausedState
	if json.Unmarshal(raw, &st) == nil && st.Spec.ID == id {
		unpinProducts(id, st.StubKernel, st.StubInitrd, st.RootImage)
	}
	if err := os.Remove(d.pausedMark(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("discard %s: %w", id, err)
	}
	return nil
}

// microHost is in's agent instance and microVM host.
func microHost(in sandbox.Instance) (*agentdriver.Instance, *host, error) {
	ai, ok := in.(*agentdriver.Instance)
	if !ok {
		return nil, nil, fmt.Errorf("%s: %w: not a running microVM sandbox of this airlock", in.ID(), sandbox.ErrUnsupported)
	}
	h, ok := ai.Host().(*host)
	if !ok {
		return nil, nil, fmt.Errorf("%s: %w: not a microVM sandbox", in.ID(), sandbox.ErrUnsupported)
	}
	return ai, h, nil
}

// Migrate stops v and saves the whole machine to out through QMP: its
// RAM is not the shared file of a snapshot being made, so it goes into
// the stream; the bandwidth is unlimited (QEMU's default is 32 MiB/s,
// for a network).
func (q *qemu) Migrate(ctx context.Context, v *vm, out *os.File, plain bool) error {
	ctl, ok := v.ctl.(*qmp)
	if !ok {
		return errors.New("no QMP connection to QEMU")
	}
	if _, err := ctl.call(ctx, "stop", nil); err != nil {
		return err
	}
	caps := []map[string]any{{"capability": "x-ignore-shared", "state": !plain}}
	if _, err := ctl.call(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}); err != nil {
		return err
	}
	if _, err := ctl.call(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return err
	}
	if _, err := ctl.callFD(ctx, "getfd", map[string]any{"fdname": "pause"}, out); err != nil {
		return err
	}
	if _, err := ctl.call(ctx, "migrate", map[string]any{"uri": "fd:pause"}); err != nil {
		return err
	}
	return awaitMigration(ctx, ctl)
}

// Cont lets a machine stopped by Migrate run on.
func (q *qemu) Cont(ctx context.Context, v *vm) error {
	ctl, ok := v.ctl.(*qmp)
	if !ok {
		return errors.New("no QMP connection to QEMU")
	}
	_, err := ctl.call(ctx, "cont", nil)
	return err
}

// newToken is a resume's token: 32 hex digits.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newSeed is fresh entropy for a resumed guest.
func newSeed() []byte {
	b := make([]byte, 64)
	_, _ = rand.Read(b)
	return b
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
