package native

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one native sandbox seen from the host: the agent, PID 1 of the
// sandbox's namespaces; the sandbox's cgroups; its locks.
type host struct {
	d        *Driver
	spec     sandbox.Spec
	cmd      *exec.Cmd
	conn     net.Conn
	agentLog agentdriver.LogBuffer
	done     chan struct{}

	lock, slot *hostlock.Lock
	base       int

	group, agentGroup, workload *cgroup.Group

	teardownOnce sync.Once
	teardownErr  error
}

var (
	_ agentdriver.Host    = (*host)(nil)
	_ sandbox.UsageReader = (*host)(nil)
)

// Exec is the exec's own cgroup below the workload group, where the host
// reads its counters and kills it without the agent.
func (h *host) Exec(string) agentdriver.ExecHost {
	if h.workload == nil {
		return agentdriver.SandboxCgroupDelta(nil)
	}
	// A thread of the agent passes through each exec group, so kills of an
	// exec group spare it.
	return agentdriver.PerExecCgroup(h.workload, h.cmd.Process.Pid)
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
// It works on a half-made sandbox too.
func (h *host) Teardown(context.Context) error {
	h.teardownOnce.Do(func() {
		if h.conn != nil {
			h.conn.Close()
		}
		h.stopAgent()
		if h.group != nil {
			_ = h.group.Kill(5 * time.Second)
			if err := h.group.Remove(); err != nil {
				h.d.opts.Logger.Warn("remove sandbox cgroups", "sandbox_id", h.spec.ID, "err", err)
			}
			if h.group.Exists() {
				h.teardownErr = fmt.Errorf("sandbox %s: cgroups remain after close", h.spec.ID)
			}
		}
		h.slot.Drop()
		h.lock.Release()
	})
	return h.teardownErr
}

// rangeSize is the number of host uids (and gids) each sandbox gets.
const rangeSize = hostlock.RangeSize

func (h *host) makeCgroups() error {
	hier := h.d.hier
	h.group = hier.Open(h.d.opts.CgroupParent + "/" + h.spec.ID)
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
	if err := h.agentGroup.Set(cgroup.Limits{MemoryBytes: l.DiskBytes + l.TmpBytes + 128<<20, Pids: 256}); err != nil {
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
	if h.cmd == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.d.opts.Logger.Error("sandbox agent did not exit after SIGKILL", "sandbox_id", h.spec.ID)
	}
}

// agentErr returns what the agent wrote to stderr, for an error message.
func (h *host) agentErr() string {
	b := bytes.TrimSpace(h.agentLog.Bytes())
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}
