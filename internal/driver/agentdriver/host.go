package agentdriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Host is what a driver supplies: the environment its agent runs in, seen
// from the host.
type Host interface {
	// Exec prepares the host's view of exec id, before the agent starts it.
	Exec(id string) ExecHost
	// Done is closed when the environment has ended: the agent's process,
	// or the runtime that holds it, has exited.
	Done() <-chan struct{}
	// Ended says why the environment ended by itself, once Done is closed;
	// nil when it did not (it was closed) or nothing is known.
	Ended() *Death
	// Teardown stops the environment and removes everything it made on
	// the host, without the agent's help: it runs once, after the agent
	// connection is closed, whatever state the environment is in. The
	// error names what could not be removed.
	Teardown(ctx context.Context) error
}

// ExecHost is the host's view of one exec: the kill that does not depend on
// the agent, and the counters the agent's word is checked against.
type ExecHost interface {
	// Started says where the agent runs the exec: the name of its group
	// below the sandbox's workload group, as the untrusted agent says it.
	Started(cgroup string) error
	// Kill kills every process of the exec without the agent. An error
	// wrapping sandbox.ErrUnsupported says the host cannot (it sees only
	// the whole sandbox): the agent is asked instead.
	Kill() error
	// Finish reads the host's counters once the exec has ended: it sets in
	// r's usage what the host sees, and returns what the host saw happen.
	// It may tidy up (kill what is left of a foreground exec, remove its
	// group) afterwards, without delaying the result.
	Finish(r *sandbox.Result, background bool) sandbox.Evidence
	// Abandon drops what Exec prepared, when the exec did not start.
	Abandon()
}

// Death is why a sandbox ended by itself.
type Death struct {
	// Reason is oom, pids or error.
	Reason sandbox.Reason
	// Msg says it in words a model can act on.
	Msg string
}

// CgroupDeath reads from the sandbox's host cgroup why it died: the memory
// limit killed a process of it (for gVisor or a virtual machine, the
// runtime that held the whole sandbox), or the process limit refused a
// fork. what names the runtime ("gVisor's kernel", "the virtual machine").
// Nil when the counters say neither.
func CgroupDeath(g *cgroup.Group, l sandbox.Limits, what string, hostPids int64) *Death {
	if g == nil {
		return nil
	}
	st, _ := g.Stats()
	switch {
	case st.OOMKills > 0:
		return OOMDeath(l, what)
	case st.PidsMax > 0:
		return &Death{Reason: sandbox.ReasonPids, Msg: fmt.Sprintf("%s ran into the host's process limit (%d for a sandbox of %d processes)", what, hostPids, l.Pids)}
	}
	return nil
}

// OOMDeath is the death of a sandbox whose memory limit killed what
// holds it (what: "the agent", "gVisor's kernel").
func OOMDeath(l sandbox.Limits, what string) *Death {
	return &Death{Reason: sandbox.ReasonOOM, Msg: fmt.Sprintf("out of memory: the memory limit of %s killed %s, and every process of the sandbox with it", sandbox.FormatBytes(l.MemoryBytes), what)}
}

// PerExecCgroup is the host's view of an exec that has a cgroup of its own
// below workload, which the host can read and kill: its counters are the
// exec's usage, and its kill does not depend on the agent. spare are pids
// a kill spares (a thread of the agent passes through the groups it makes).
func PerExecCgroup(workload *cgroup.Group, spare ...int) ExecHost {
	return &perExec{workload: workload, spare: spare, pidsBefore: workload.PidsMax()}
}

type perExec struct {
	workload   *cgroup.Group
	spare      []int
	pidsBefore int64
	group      *cgroup.Group // set once started
}

func (e *perExec) Started(name string) error {
	// The name comes from the agent: only a plain name below this
	// sandbox's own workload group is accepted.
	if !sandbox.ValidID(name) {
		return errors.New("the agent named no valid cgroup for the exec")
	}
	e.group = e.workload.Child(name)
	return nil
}

func (e *perExec) Kill() error {
	if e.group == nil {
		return fmt.Errorf("the exec has no cgroup yet: %w", sandbox.ErrUnsupported)
	}
	return e.group.Kill(5*time.Second, e.spare...)
}

func (e *perExec) Finish(r *sandbox.Result, background bool) sandbox.Evidence {
	if e.group == nil {
		return sandbox.Evidence{}
	}
	// A counter that cannot be read reads as zero; the others still count.
	st, _ := e.group.Stats()
	r.Usage.CPUMS = st.CPUNanos / 1e6
	r.Usage.MemoryPeakBytes = st.MemoryPeak
	// v1 counts a failed fork in the forking group, v2 in the group whose
	// limit was hit: look at both.
	ev := sandbox.Evidence{OOM: st.OOMKills > 0, Pids: st.PidsMax > 0 || e.workload.PidsMax() > e.pidsBefore}
	// The agent has ended a foreground command's tree already; the host's
	// own check and the removal of the group need not delay the result.
	go func() {
		if !background {
			_ = e.group.Kill(5*time.Second, e.spare...)
		}
		e.Abandon()
	}()
	return ev
}

func (e *perExec) Abandon() {
	if e.group != nil && e.group.Exists() {
		if procs, _ := e.group.Procs(); len(procs) == 0 {
			_ = e.group.Remove()
		}
	}
}

// SandboxCgroupDelta is the host's view of an exec where the host sees only
// the whole sandbox's cgroup (gVisor, a virtual machine, a container): what
// changed in it while the exec ran is held against the exec, the agent's own
// usage figures stand, and kills go through the agent.
func SandboxCgroupDelta(g *cgroup.Group) ExecHost {
	e := &sandboxDelta{group: g}
	if g != nil {
		e.before, _ = g.Stats()
	}
	return e
}

type sandboxDelta struct {
	group  *cgroup.Group
	before cgroup.Stats
}

func (e *sandboxDelta) Started(string) error { return nil }

func (e *sandboxDelta) Kill() error {
	return fmt.Errorf("the host sees only the whole sandbox: %w", sandbox.ErrUnsupported)
}

func (e *sandboxDelta) Finish(r *sandbox.Result, _ bool) sandbox.Evidence {
	if e.group == nil {
		return sandbox.Evidence{}
	}
	st, err := e.group.Stats()
	if err != nil {
		return sandbox.Evidence{}
	}
	// The memory limit is the whole sandbox's: when the host's OOM killer
	// ended a process while the exec ran, it is this exec's doing as far
	// as anybody can tell.
	return sandbox.Evidence{OOM: st.OOMKills > e.before.OOMKills, Pids: st.PidsMax > e.before.PidsMax}
}

func (e *sandboxDelta) Abandon() {}

// CgroupUsage reads a whole sandbox's usage from its host cgroup.
func CgroupUsage(g *cgroup.Group, l sandbox.Limits) (sandbox.SandboxUsage, error) {
	if g == nil {
		return sandbox.SandboxUsage{}, fmt.Errorf("the sandbox has no cgroup on this host: %w", sandbox.ErrUnsupported)
	}
	mem, err := g.MemoryCurrent()
	if err != nil {
		return sandbox.SandboxUsage{}, fmt.Errorf("read the sandbox's memory: %w", err)
	}
	cpu, err := g.CPUNanos()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return sandbox.SandboxUsage{}, fmt.Errorf("read the sandbox's CPU time: %w", err)
	}
	return sandbox.SandboxUsage{MemoryBytes: mem, MemoryLimitBytes: l.MemoryBytes, CPUMS: cpu / 1e6, CPUs: l.CPUs, At: time.Now()}, nil
}

// Lifecycle is the end of a host's environment, for a Host to embed: Done
// closes once the environment has ended, Ended says why it ended by
// itself, and Closing, once set (when Teardown begins), says it does not
// end by itself from then on. The zero value is ready.
type Lifecycle struct {
	// Closing is set once Teardown begins.
	Closing atomic.Bool

	initOnce sync.Once
	done     chan struct{}
	doneOnce sync.Once
	mu       sync.Mutex
	ended    *Death
}

func (l *Lifecycle) init() { l.initOnce.Do(func() { l.done = make(chan struct{}) }) }

// Done is closed once the environment has ended.
func (l *Lifecycle) Done() <-chan struct{} {
	l.init()
	return l.done
}

// CloseDone closes Done, once.
func (l *Lifecycle) CloseDone() {
	l.init()
	l.doneOnce.Do(func() { close(l.done) })
}

// Ended says why the environment ended by itself, once it has.
func (l *Lifecycle) Ended() *Death {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// SetEnded records dt as why the environment ended, unless it is being
// closed; it says whether it did.
func (l *Lifecycle) SetEnded(dt *Death) bool {
	if l.Closing.Load() {
		return false
	}
	l.mu.Lock()
	l.ended = dt
	l.mu.Unlock()
	return true
}
