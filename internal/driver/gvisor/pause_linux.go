package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Pause and resume with memory: `runsc checkpoint` writes the sandbox's
// kernel, processes and memory (its tmpfs, the workspace, with them) to
// the directory the caller gives, and ends it; `runsc restore` starts it
// again from there, on the same bundle. The agent's session socket is
// bound on the host, which a checkpoint cannot save: the agent closes it
// before (agent.SuspendSignal) and listens again after
// (agent.ResumeSignal). The bundle outlives the pause, marked so that the
// sweep spares it (pausedMark).

var _ sandbox.Pauser = (*Driver)(nil)

// pausedMark, in a bundle, says its sandbox is paused: no process holds
// its lock, and the sweep leaves it alone.
const pausedMark = "paused"

// pausedState is what Resume needs of a paused sandbox.
type pausedState struct {
	Spec sandbox.Spec `json:"spec"`
	// Ran is how long it ran before the pause: its lifetime goes on
	// from there.
	Ran time.Duration `json:"ran"`
	// OCI is its bundle's OCI spec (config.json): another daemon sharing
	// the object store makes a bundle from it to resume it.
	OCI json.RawMessage `json:"oci,omitempty"`
}

// pausedWait is how long Paused waits for the runsc of a sandbox whose
// pause was under way to exit.
var pausedWait = 3 * time.Second

// checkpointTimeout bounds one `runsc checkpoint`.
var checkpointTimeout = 10 * time.Minute

// Pause checkpoints the persistent sandbox in into dir and ends it. A
// sandbox with host mounts or a given root is refused: their pinned
// mounts are gone once it started.
func (d *Driver) Pause(ctx context.Context, in sandbox.Instance, dir string) (_ []byte, _ sandbox.Instance, err error) {
	ai, ok := in.(*agentdriver.Instance)
	if !ok {
		return nil, in, fmt.Errorf("pause %s: %w: not a running gVisor sandbox of this airlock", in.ID(), sandbox.ErrUnsupported)
	}
	h, ok := ai.Host().(*host)
	if !ok {
		return nil, in, fmt.Errorf("pause %s: %w: not a gVisor sandbox", in.ID(), sandbox.ErrUnsupported)
	}
	spec := h.spec
	switch {
	case !h.persistent:
		return nil, in, &sandbox.UnsupportedError{What: "pause", Why: "this sandbox dies with the process that made it (a one-shot run's)", Fix: "pause sandboxes of `airlock serve`"}
	case spec.Root != "" || len(spec.Mounts) > 0:
		return nil, in, &sandbox.UnsupportedError{What: "pause", Why: "a gVisor sandbox with a host root or host mounts cannot be paused yet: its mounts are not kept for the restore", Fix: "copy the files in with the file API, or snapshot the sandbox's files instead"}
	}
	if err := h.checkRoom(dir); err != nil {
		return nil, in, err
	}
	raw, err := h.DriverState()
	if err != nil {
		return nil, in, err
	}
	oci, err := os.ReadFile(filepath.Join(h.bundle, "config.json"))
	if err != nil {
		return nil, in, fmt.Errorf("pause %s: %w", spec.ID, err)
	}
	ran := time.Since(h.created)
	if err := ai.Detach(ctx); err != nil {
		return nil, in, err
	}
	// From here on the sandbox runs without this process: a failure
	// lets the agent listen again and reattaches to it.
	back := func(cause error) ([]byte, sandbox.Instance, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = d.runscCmd(10*time.Second, "kill", spec.ID, signalName(agent.ResumeSignal))
		again, rerr := d.Recover(rctx, spec.ID, raw)
		if rerr != nil {
			return nil, nil, fmt.Errorf("pause %s: %w; and the sandbox was lost reattaching to it: %w", spec.ID, cause, rerr)
		}
		return nil, again, fmt.Errorf("pause %s: %w", spec.ID, cause)
	}
	if _, err := d.runscCmd(10*time.Second, "kill", spec.ID, signalName(agent.SuspendSignal)); err != nil {
		return back(err)
	}
	if err := awaitGone(ctx, h.sockPath(), 10*time.Second); err != nil {
		return back(err)
	}
	// The mark holds the paused state: a process that dies before Pause
	// returns leaves it for the next (Paused).
	paused := mustJSON(pausedState{Spec: spec, Ran: ran, OCI: oci})
	if err := os.WriteFile(filepath.Join(h.bundle, pausedMark), paused, 0o600); err != nil {
		return back(fmt.Errorf("mark the bundle paused: %w", err))
	}
	if _, err := d.runscCmd(checkpointTimeout, "checkpoint", "--image-path="+dir, spec.ID); err != nil {
		_ = os.Remove(filepath.Join(h.bundle, pausedMark))
		return back(err)
	}
	// The image is whole: its digests can be taken while the sandbox's
	// processes, memory and cgroups go (SettlePause waits for that).
	settled := make(chan struct{})
	d.settling.Store(spec.ID, settled)
	go func() {
		defer close(settled)
		defer d.settling.CompareAndDelete(spec.ID, settled)
		d.endPaused(h)
	}()
	return paused, nil, nil
}

var _ sandbox.PauseSettler = (*Driver)(nil)

// SettlePause waits until what paused sandbox id held on the host is
// released (Pause ends it in the background).
func (d *Driver) SettlePause(id string) {
	if ch, ok := d.settling.Load(id); ok {
		<-ch.(chan struct{})
	}
}

var _ sandbox.PauseFinder = (*Driver)(nil)

// Paused finds sandbox id checkpointed by a process that died before it
// recorded the pause: its bundle is marked paused, with the paused state,
// and its runsc (named by raw, its reattach state) has exited. What runsc
// left is removed then.
func (d *Driver) Paused(_ context.Context, id string, raw []byte) ([]byte, bool) {
	if !sandbox.ValidID(id) || d.runsc == nil {
		return nil, false
	}
	d.SettlePause(id)
	bundle := filepath.Join(d.bundlesDir(), id)
	paused, err := os.ReadFile(filepath.Join(bundle, pausedMark))
	var st state
	if err != nil || len(paused) == 0 || json.Unmarshal(raw, &st) != nil || st.Spec.ID != id {
		return nil, false
	}
	// runsc exits once its checkpoint is written, which may still be
	// under way (runsc checkpoint outlives the process that ran it): a
	// runsc that runs on past pausedWait was not checkpointed.
	for deadline := time.Now().Add(pausedWait); ; time.Sleep(20 * time.Millisecond) {
		pidfd, err := procid.OpenPid(st.RunscPid, st.RunscStart)
		if err != nil && !hostlock.Held(hostlock.SandboxDir(d.rc.StateDir), id) {
			break
		}
		if err == nil {
			pidfd.Close()
		}
		if time.Now().After(deadline) {
			return nil, false
		}
	}
	h := &host{d: d, spec: st.Spec, bundle: bundle}
	if d.hier != nil {
		h.group = d.hier.Open(d.rc.CgroupParent + "/" + id)
	}
	d.endPaused(h)
	return paused, true
}

// endPaused removes what a checkpointed sandbox left running or made
// beyond its bundle: runsc's state, its cgroups; and takes and removes
// its lock once runsc let go of it.
func (d *Driver) endPaused(h *host) {
	log := d.rc.Logger.With("sandbox_id", h.spec.ID)
	if h.group != nil {
		if err := h.group.Kill(5*time.Second, os.Getpid()); err != nil {
			log.Warn("kill what is left in the paused sandbox's cgroup", "err", err)
		}
	}
	if _, err := d.runscCmd(10*time.Second, "delete", "--force", h.spec.ID); err != nil {
		log.Warn("delete the paused sandbox's runsc state", "err", err)
	}
	for _, f := range h.stateFiles() {
		_ = os.Remove(f)
	}
	if h.group != nil {
		_ = h.group.Remove()
	}
	for _, dir := range cgroupDirs(d.rc.CgroupParent, h.spec.ID) {
		_ = removeCgroupTree(dir)
	}
	if l, err := hostlock.WaitSandbox(d.rc.StateDir, h.spec.ID, 5*time.Second); err == nil {
		l.Release()
	} else {
		log.Warn("the paused sandbox's lock is still held", "err", err)
	}
}

// Resume restores paused sandbox id from dir: `runsc restore` on its
// bundle, in a new host cgroup; the agent listens again and the host
// reattaches.
func (d *Driver) Resume(ctx context.Context, id string, raw []byte, dir string) (_ sandbox.Instance, err error) {
	var st pausedState
	if err := json.Unmarshal(raw, &st); err != nil || st.Spec.ID != id || !sandbox.ValidID(id) {
		return nil, fmt.Errorf("resume %s: %w: its paused state does not name it", id, sandbox.ErrInvalid)
	}
	d.SettlePause(id)
	if d.runsc == nil {
		return nil, unsupported(d.runscErr.Error(), "build the pinned runsc with `make runsc`")
	}
	spec := st.Spec
	bundle := filepath.Join(d.bundlesDir(), id)
	_, err = os.Stat(filepath.Join(bundle, pausedMark))
	// Paused by another daemon (sharing the object store): no bundle
	// here, one is made from its OCI spec.
	moved := errors.Is(err, os.ErrNotExist) && len(st.OCI) > 0 && !pathExists(bundle)
	if err != nil && !moved {
		return nil, fmt.Errorf("resume %s: %w: its bundle is not a paused one's (%w)", id, sandbox.ErrNotFound, err)
	}
	hostLayers, err := d.layers(spec.AllowDegraded)
	if err != nil {
		return nil, err
	}
	lock, err := hostlock.Sandbox(d.rc.StateDir, id)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", id, err)
	}
	h := &host{
		d: d, spec: spec, lock: lock, bundle: bundle, persistent: true, created: time.Now().Add(-st.Ran),
		session: filepath.Join(bundle, "session"), logPath: filepath.Join(bundle, "log"),
	}
	defer func() {
		if err != nil {
			d.undoResume(h)
		}
	}()
	if moved {
		// Marked paused like the bundle of a pause here: a resume that
		// fails leaves it for another try, a discard removes it.
		if err := d.cloneBundle(h, st.OCI, true); err != nil {
			_ = os.RemoveAll(bundle)
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(bundle, pausedMark), raw, 0o600); err != nil {
			return nil, fmt.Errorf("resume %s: mark its bundle paused: %w", id, err)
		}
	}
	hl := hostLimitsFor(spec.Limits, d.swap)
	if d.hier != nil {
		if err := h.makeCgroup(hl); err != nil {
			return nil, err
		}
	}
	if err := h.restore(ctx, dir); err != nil {
		return nil, err
	}
	client, agentLayers, err := h.rejoin(ctx)
	if err != nil {
		return nil, h.startError(err)
	}
	if err := h.limitCPU(hl); err != nil {
		client.Close()
		return nil, err
	}
	_ = os.Remove(filepath.Join(bundle, pausedMark))
	return agentdriver.NewReattached(agentdriver.Config{
		Spec: spec, Client: client, Layers: append(hostLayers, agentLayers...), Host: h, Logger: d.rc.Logger,
	}, d.rc.Egress, h.created)
}

// undoResume ends a restore that failed half-way, leaving the bundle for
// another try.
func (d *Driver) undoResume(h *host) {
	if h.cmd != nil {
		_ = h.cmd.Process.Kill()
		h.waitDone(10 * time.Second)
	}
	h.lock.Release()
	h.lock = nil
	d.endPaused(h)
}

// restore starts `runsc restore` of the sandbox from dir, as
// startPersistent starts `runsc run`.
func (h *host) restore(ctx context.Context, dir string) error {
	d := h.d
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	logf, err := os.OpenFile(h.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open the sandbox's log: %w", err)
	}
	defer logf.Close()
	args := append(d.runscArgs(), "restore", "--image-path="+dir, "--bundle", h.bundle, h.spec.ID)
	cmd := &exec.Cmd{
		Path: d.runsc.Path, Args: append([]string{"runsc"}, args...), Env: []string{}, Dir: "/",
		Stdin: null, Stdout: logf, Stderr: logf,
		ExtraFiles:  []*os.File{h.lock.File()},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if err := h.startInGroup(cmd); err != nil {
		return fmt.Errorf("start runsc restore: %w", err)
	}
	h.cmd, h.runscPid = cmd, cmd.Process.Pid
	go h.wait()
	return nil
}

// rejoin has the restored sandbox's agent listen again and performs the
// handshake on its session socket. The wake-up is a runsc kill
// (agent.ResumeSignal), started once runsc's state file of the sandbox
// exists (before, every try only fails, and starting runsc takes CPU from
// the restore): it waits for the restore to finish, then delivers. A kill
// that reached the container in the moment between its creation and the
// restore's start is dropped by runsc (a created container takes only
// SIGKILL and SIGTERM), so a sandbox that runs without listening is asked
// again (a listening agent ignores the repeat).
func (h *host) rejoin(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := h.wake(dctx); err != nil {
		return nil, nil, err
	}
	var c *net.UnixConn
	for {
		actx, acancel := context.WithTimeout(dctx, wakeAgain)
		var err error
		c, err = agentdriver.DialSession(actx, h.sockPath(), h.Done())
		acancel()
		if err == nil {
			break
		}
		if dctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, nil, err
		}
		if h.runsState() == "running" {
			_, _ = h.d.runscCmd(10*time.Second, "kill", h.spec.ID, signalName(agent.ResumeSignal))
		}
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err == nil {
		peer.Pidfd.Close()
		err = h.checkPeer(peer)
	}
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(dctx, func() { c.Close() })
	defer stop()
	return agent.Dial(dctx, c)
}

// wake sends the restored sandbox's agent agent.ResumeSignal: runsc kill,
// once runsc's state file exists (or after stateWait without it), tried
// until it takes.
func (h *host) wake(ctx context.Context) error {
	waitUntil := time.Now().Add(stateWait)
	for {
		if h.runsState() != "" || time.Now().After(waitUntil) {
			_, err := h.d.runscCmd(10*time.Second, "kill", h.spec.ID, signalName(agent.ResumeSignal))
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("have the restored agent listen: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("have the restored agent listen: %w", ctx.Err())
		case <-h.Done():
			return errors.New("runsc restore exited")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

const (
	// stateWait bounds how long wake waits for runsc's state file before
	// it tries runsc kill all the same (a runsc that names it otherwise).
	stateWait = 20 * time.Second
	// wakeAgain is how long rejoin waits for the agent's socket before it
	// asks a restored sandbox again.
	wakeAgain = 2 * time.Second
)

// runsState is the status in runsc's state file of h ("created",
// "running"…), or "" without one (`runsc restore` writes it once it made
// the container, and says running once the restore is done).
func (h *host) runsState() string {
	b, err := os.ReadFile(filepath.Join(h.d.stateDir(), h.spec.ID+"_sandbox:"+h.spec.ID+".state"))
	if err != nil {
		return ""
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(b, &st) != nil || st.Status == "" {
		return "unknown"
	}
	return st.Status
}

// Discard removes paused sandbox id's bundle.
func (d *Driver) Discard(ctx context.Context, id string, _ []byte) error {
	if !sandbox.ValidID(id) {
		return fmt.Errorf("discard %q: %w", id, sandbox.ErrInvalid)
	}
	d.SettlePause(id)
	lock, err := hostlock.Sandbox(d.rc.StateDir, id)
	if err != nil {
		return fmt.Errorf("discard %s: %w", id, err)
	}
	h := &host{d: d, spec: sandbox.Spec{ID: id}, bundle: filepath.Join(d.bundlesDir(), id), lock: lock}
	if d.hier != nil {
		h.group = d.hier.Open(d.rc.CgroupParent + "/" + id)
	}
	h.teardown()
	return nil
}

// awaitGone waits until the session socket's file at path is gone: the
// agent closed its listener and removed it.
func awaitGone(ctx context.Context, path string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		_, err := os.Lstat(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent did not close its session socket within %v", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// signalName is sig as runsc kill takes it.
func signalName(sig syscall.Signal) string { return fmt.Sprint(int(sig)) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func pathExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
