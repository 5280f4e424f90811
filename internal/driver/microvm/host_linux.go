package microvm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one microVM sandbox seen from the host: a QEMU process in the
// sandbox's cgroup, running as the uid of its own range; the agent's port;
// the locks.
type host struct {
	d       *Driver
	spec    sandbox.Spec
	lock    *hostlock.Lock
	uidLock *hostlock.Lock
	uid     int
	group   *cgroup.Group // the host cgroup of QEMU
	vm      *vm
	console *agentdriver.LogBuffer // the guest's console and QEMU's messages
	// Restored says the machine came from a snapshot (else it booted).
	Restored bool
	// shape is what the machine was started with (for a pause).
	shape shape
	// created is when the sandbox was made (a resumed one: less the
	// time it ran before its pause); hostLayers the host's layers then.
	created    time.Time
	hostLayers []sandbox.Layer
	// client is the agent's session on sess, over the port vm.Agent,
	// which outlives sessions (a pause's suspend, pause_linux.go); wmu
	// keeps their writes apart.
	client *agent.Client
	sess   *agent.SessionConn
	wmu    sync.Mutex

	agentdriver.Lifecycle

	closeOnce   sync.Once
	teardownErr error
}

var (
	_ agentdriver.Host    = (*host)(nil)
	_ sandbox.UsageReader = (*host)(nil)
)

// Exec: the host sees QEMU's cgroup only, which holds the whole machine;
// kills go through the agent, and the guest's own cgroups count each exec.
func (h *host) Exec(string) agentdriver.ExecHost { return agentdriver.SandboxCgroupDelta(h.group) }

// Usage reads QEMU's host cgroup: the guest's RAM as far as it is touched,
// and QEMU's own.
func (h *host) Usage(context.Context) (sandbox.SandboxUsage, error) {
	return agentdriver.CgroupUsage(h.group, h.spec.Limits)
}

// Pid is QEMU's process; 0 before it starts.
func (h *host) Pid() int {
	if h.vm == nil {
		return 0
	}
	return h.vm.Pid
}

// Group is QEMU's host cgroup.
func (h *host) Group() *cgroup.Group { return h.group }

// makeCgroup makes the sandbox's host cgroup: QEMU's memory ceiling (the
// guest's RAM and QEMU's own), its process limit. The CPU quota comes once
// the machine is up (limitCPU): its start is not the workload's.
func (h *host) makeCgroup(s shape) error {
	d := h.d
	g := d.hier.Open(d.rc.CgroupParent + "/" + h.spec.ID)
	if g.Exists() {
		// A stale group of a sandbox of the same name.
		_ = g.Kill(5*time.Second, os.Getpid())
		if err := g.Remove(); err != nil {
			return fmt.Errorf("remove the stale cgroup of %s: %w", h.spec.ID, err)
		}
	}
	if err := g.Create(); err != nil {
		return err
	}
	h.group = g
	return g.Set(cgroup.Limits{MemoryBytes: hostMemory(s.MemoryMiB, s.Accel), Pids: qemuPids})
}

// limitCPU sets the sandbox's CPU quota on QEMU's cgroup.
func (h *host) limitCPU() error {
	return h.group.Set(cgroup.Limits{CPUs: h.spec.Limits.CPUs})
}

// start starts the sandbox's machine: restored from the snapshot of its
// shape (made now when there is none yet), else booted.
func (h *host) start(ctx context.Context, s shape) error {
	d := h.d
	h.shape = s
	m := s.machine()
	m.UID, m.GID, m.Groups, m.Group = h.uid, h.uid, d.vmGroups(), h.group
	if !d.opts.Cold {
		err := h.restore(ctx, s, m)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		d.rc.Logger.Warn("cannot start the microVM from a snapshot: booting it", "sandbox_id", h.spec.ID, "err", err)
	}
	v, console, err := d.boot(ctx, m)
	h.console = console
	if err != nil {
		return err
	}
	h.vm = v
	go h.wait()
	return nil
}

// restore starts a machine like m from the snapshot of shape s.
func (h *host) restore(ctx context.Context, s shape, like *machine) error {
	m := *like
	snap, err := h.d.snapshotFor(ctx, s)
	if err != nil {
		return err
	}
	state, err := os.Open(snap.State)
	if errors.Is(err, fs.ErrNotExist) {
		// Pruned from the cache since this driver loaded it (cacheKeepN):
		// make it again.
		h.d.mu.Lock()
		delete(h.d.snaps, snap.Key)
		h.d.mu.Unlock()
		if snap, err = h.d.snapshotFor(ctx, s); err == nil {
			state, err = os.Open(snap.State)
		}
	}
	if err != nil {
		return fmt.Errorf("open the snapshot's state: %w", err)
	}
	touch(filepath.Dir(snap.State))
	touch(filepath.Dir(snap.Stub.Kernel))
	defer state.Close()
	m.RAM, m.RAMShared, m.State = snap.RAM, false, state
	m.Kernel, m.Initramfs = snap.Stub.Kernel, snap.Stub.Initramfs
	h.console = &agentdriver.LogBuffer{}
	m.Console = h.console
	v, err := h.d.vmm.Start(ctx, &m)
	if err != nil {
		return fmt.Errorf("%w%s", err, consoleTail(h.console))
	}
	h.vm, h.Restored = v, true
	go h.wait()
	return nil
}

// handshake sends the agent its config, with the guest's identity and the
// host's clock, and performs the agent's handshake.
func (h *host) handshake(ctx context.Context, cfg *agent.Config) (*agent.Client, []sandbox.Layer, error) {
	cfg.Guest.TimeUnixNano = time.Now().UnixNano()
	dctx, cancel := context.WithTimeout(ctx, h.d.opts.BootTimeout)
	defer cancel()
	stop := context.AfterFunc(dctx, func() { _ = h.vm.Agent.Close() })
	defer stop()
	if err := agent.WriteConfig(h.vm.Agent, cfg); err != nil {
		return nil, nil, h.startError(err)
	}
	h.sess = agent.NewSession(h.vm.Agent, &h.wmu)
	client, layers, err := agent.Dial(dctx, h.sess)
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (the agent did not answer within %v)", err, h.d.opts.BootTimeout)
		}
		return nil, nil, h.startError(err)
	}
	h.client = client
	return client, layers, nil
}

// startError explains why a sandbox did not start: QEMU's exit and the
// guest's console.
func (h *host) startError(err error) error {
	select {
	case <-h.Done():
	case <-time.After(time.Second):
	}
	if dt := h.Ended(); dt != nil {
		return fmt.Errorf("start the sandbox: %w: %s", err, dt.Msg)
	}
	return fmt.Errorf("start the sandbox: %w%s", err, consoleTail(h.console))
}

// wait waits for QEMU to exit: the sandbox has ended. If nobody closed it,
// it died; the host's counters and QEMU's exit say why.
func (h *host) wait() {
	err := h.vm.Err()
	if !h.Closing.Load() {
		dt := agentdriver.CgroupDeath(h.group, h.spec.Limits, "the virtual machine", qemuPids)
		if dt == nil {
			msg := "the virtual machine (QEMU) exited"
			if err != nil {
				msg += ": " + err.Error()
			}
			dt = &agentdriver.Death{Reason: sandbox.ReasonError, Msg: msg + consoleTail(h.console)}
		}
		h.SetEnded(dt)
		h.d.rc.Logger.Warn("microVM sandbox ended by itself", "sandbox_id", h.spec.ID, "reason", dt.Reason, "err", dt.Msg)
	}
	h.CloseDone()
}

// Teardown ends the sandbox and removes everything it made on the host:
// QEMU (the machine dies with it; nothing of the guest needs to be told),
// whatever is left in its cgroup, the cgroup and the locks. There are no
// files: QEMU got every file and socket as a descriptor.
func (h *host) Teardown(context.Context) error {
	h.closeOnce.Do(func() {
		h.Closing.Store(true)
		log := h.d.rc.Logger.With("sandbox_id", h.spec.ID)
		var left []string
		if h.group != nil {
			// A frozen machine dies only once thawed.
			h.group.Thaw()
		}
		if h.vm != nil && !h.vm.Kill(10*time.Second) {
			log.Error("QEMU did not exit after SIGKILL")
			left = append(left, fmt.Sprintf("QEMU process %d", h.vm.Pid))
		}
		if h.group != nil {
			// Killing thaws a frozen group first.
			if err := h.group.Kill(5*time.Second, os.Getpid()); err != nil {
				log.Warn("kill what is left in the sandbox's cgroup", "err", err)
			}
			if err := h.group.Remove(); err != nil {
				log.Warn("remove the sandbox's cgroup", "err", err)
				left = append(left, "cgroup "+h.group.Path("memory"))
			}
		}
		h.uidLock.Drop()
		h.lock.Release()
		if h.vm == nil {
			h.CloseDone()
		}
		if len(left) > 0 {
			h.teardownErr = fmt.Errorf("sandbox %s: left on the host after close: %v", h.spec.ID, left)
		}
	})
	return h.teardownErr
}
