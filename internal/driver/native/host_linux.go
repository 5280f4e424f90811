package native

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/cow"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one native sandbox seen from the host: the agent, PID 1 of the
// sandbox's namespaces; the sandbox's cgroups; its locks.
type host struct {
	d        *Driver
	spec     sandbox.Spec
	proc     *agentProc // nil for a sandbox this process reattached to
	conn     net.Conn
	agentLog agentdriver.LogBuffer
	done     chan struct{}
	doneOnce sync.Once

	// persistent: the sandbox outlives this process (Options.Persistent);
	// its agent serves sessions at sockPath and writes its log to logPath.
	persistent        bool
	created           time.Time // when the sandbox was made
	sockPath, logPath string
	// agentPid is the agent's host pid; agentStart when it started.
	agentPid   int
	agentStart uint64
	// watch tells a sandbox this process reattached to (its agent is not
	// its child) that the agent has died, and kills it.
	watch *procid.PidWatch

	lock, slot *hostlock.Lock
	base       int

	group, agentGroup, workload *cgroup.Group

	teardownOnce sync.Once
	teardownErr  error
}

var (
	_ agentdriver.Host         = (*host)(nil)
	_ agentdriver.HostDetacher = (*host)(nil)
	_ agentdriver.HostState    = (*host)(nil)
	_ sandbox.UsageReader      = (*host)(nil)
	_ sandbox.CowMounter       = (*host)(nil)
)

// CowLayers lists the sandbox's copy-on-write mounts.
func (h *host) CowLayers() []sandbox.CowLayer {
	return sandbox.CowLayers(h.d.rc.StateDir, h.spec)
}

// closeDone says the agent has exited.
func (h *host) closeDone() { h.doneOnce.Do(func() { close(h.done) }) }

// Exec is the exec's own cgroup below the workload group, where the host
// reads its counters and kills it without the agent.
func (h *host) Exec(string) agentdriver.ExecHost {
	if h.workload == nil {
		return agentdriver.SandboxCgroupDelta(nil)
	}
	// A thread of the agent passes through each exec group, so kills of an
	// exec group spare it.
	return agentdriver.PerExecCgroup(h.workload, h.agentPid)
}

func (h *host) Done() <-chan struct{} { return h.done }

// Ended says the agent exited, and what it said.
func (h *host) Ended() *agentdriver.Death {
	select {
	case <-h.done:
	default:
		return nil
	}
	return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: "the sandbox's agent exited" + h.agentErr()}
}

// Usage reads the whole sandbox's cgroup: the workload and the agent,
// whose share is what the file API wrote to /workspace and /tmp.
func (h *host) Usage(context.Context) (sandbox.SandboxUsage, error) {
	return agentdriver.CgroupUsage(h.group, h.spec.Limits)
}

// Teardown kills the agent (as PID 1 of the sandbox, its death takes every
// process of the sandbox with it), removes the cgroups and drops the locks.
// It works on a half-made sandbox too, and on one this process reattached
// to, whose locks the agent held.
func (h *host) Teardown(context.Context) error {
	h.teardownOnce.Do(func() {
		if h.conn != nil {
			h.conn.Close()
		}
		if h.workload != nil {
			// A paused (frozen) sandbox's commands die only once thawed.
			h.workload.Thaw()
		}
		h.stopAgent()
		if h.group != nil {
			_ = h.group.Kill(5 * time.Second)
			if err := h.group.Remove(); err != nil {
				h.d.rc.Logger.Warn("remove sandbox cgroups", "sandbox_id", h.spec.ID, "err", err)
			}
			if h.group.Exists() {
				h.teardownErr = fmt.Errorf("sandbox %s: cgroups remain after close", h.spec.ID)
			}
		}
		if h.watch != nil {
			h.watch.Stop()
		}
		h.slot.Drop()
		if h.lock == nil && h.persistent {
			// The dead agent held it: take it to remove it.
			var err error
			if h.lock, err = hostlock.WaitSandbox(h.d.rc.StateDir, h.spec.ID, 2*time.Second); err != nil {
				h.d.rc.Logger.Warn("the sandbox's lock is still held after its agent was killed", "sandbox_id", h.spec.ID, "err", err)
			}
		}
		if h.persistent {
			_ = os.Remove(h.sockPath)
			_ = os.Remove(h.logPath)
		}
		// The layers go with the sandbox: its pending changes with them.
		for _, l := range sandbox.CowLayers(h.d.rc.StateDir, h.spec) {
			if err := cow.Remove(l.Dir); err != nil {
				h.d.rc.Logger.Warn("remove a cow layer", "sandbox_id", h.spec.ID, "dir", l.Dir, "err", err)
			}
		}
		h.lock.Release()
	})
	return h.teardownErr
}

// Detach lets go of the sandbox: this process's copies of its locks close
// (the agent holds them still) and the host stops watching the agent.
func (h *host) Detach() {
	if h.watch != nil {
		h.watch.Stop()
	}
	h.slot.Drop()
	h.lock.Drop()
}

// state is what a later process needs to reattach to a native sandbox.
type state struct {
	Spec    sandbox.Spec `json:"spec"`
	UIDBase int          `json:"uid_base"`
	// Created is when the sandbox was made.
	Created time.Time `json:"created,omitzero"`
	// AgentPid and AgentStart name the agent's process.
	AgentPid   int    `json:"agent_pid"`
	AgentStart uint64 `json:"agent_start"`
}

// DriverState is what a later process needs to reattach (Driver.Recover).
func (h *host) DriverState() ([]byte, error) {
	if !h.persistent {
		return nil, nil
	}
	if h.agentStart == 0 {
		h.agentStart, _ = procid.StartTime(h.agentPid)
	}
	return json.Marshal(state{Spec: h.spec, UIDBase: h.base, AgentPid: h.agentPid, AgentStart: h.agentStart, Created: h.created})
}

// bindSession binds the socket the agent will listen on for host sessions
// (StateDir/sessions/ID.sock, root's alone), and names the agent's log.
func (h *host) bindSession() (*os.File, error) {
	dir, err := agentdriver.SessionDir(h.d.rc.StateDir)
	if err != nil {
		return nil, err
	}
	h.sockPath = filepath.Join(dir, h.spec.ID+".sock")
	h.logPath = filepath.Join(dir, h.spec.ID+".log")
	// A socket left by an earlier sandbox of this id is this one's to
	// replace: this process holds the id's lock.
	_ = os.Remove(h.sockPath)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("make the agent's session socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: h.sockPath}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make the agent's session socket: %w", err)
	}
	if err := os.Chmod(h.sockPath, 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make the agent's session socket root's alone: %w", err)
	}
	return os.NewFile(uintptr(fd), "session"), nil
}

// rangeSize is the number of host uids (and gids) each sandbox gets.
const rangeSize = hostlock.RangeSize

func (h *host) makeCgroups() error {
	hier := h.d.hier
	h.group = hier.Open(h.d.rc.CgroupParent + "/" + h.spec.ID)
	h.agentGroup = h.group.Child("agent")
	h.workload = h.group.Child("workload")
	for _, g := range []*cgroup.Group{h.group, h.agentGroup, h.workload} {
		if err := g.Create(); err != nil {
			return err
		}
	}
	l := h.spec.Limits
	if err := h.workload.Set(cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: l.Pids}); err != nil {
		return err
	}
	// The agent gets room for the files it writes on the workload's behalf,
	// and a thread cap of its own.
	if err := h.agentGroup.Set(agentLimits(l)); err != nil {
		return err
	}
	if err := h.workload.Delegate(h.base, h.base); err != nil {
		return err
	}
	return h.group.DelegateProcs(h.base, h.base)
}

// stopAgent kills the agent; as PID 1 of the sandbox its death takes every
// process of the sandbox with it.
func (h *host) stopAgent() {
	switch {
	case h.proc != nil:
		_ = h.proc.kill()
	case h.watch != nil:
		_ = h.watch.Kill()
	case h.agentPid > 0 && h.agentStart > 0:
		// Reattaching failed before the agent was watched: kill it by pid
		// if it is still the same process.
		if f, err := procid.OpenPid(h.agentPid, h.agentStart); err == nil {
			_ = unix.PidfdSendSignal(int(f.Fd()), unix.SIGKILL, nil, 0)
			f.Close()
		}
		return
	default:
		return
	}
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.d.rc.Logger.Error("sandbox agent did not exit after SIGKILL", "sandbox_id", h.spec.ID)
	}
}

// agentErr returns what the agent wrote to stderr, for an error message.
func (h *host) agentErr() string {
	b := h.agentLog.Bytes()
	if h.persistent {
		b = agentdriver.Tail(h.logPath, 4<<10)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}
