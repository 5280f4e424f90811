package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one Docker sandbox seen from the host: its container, whose only
// process is the agent, talking over the container's attach stream (or,
// after a reattach, a relay's exec stream); the container's cgroup where
// this host can see it; the sandbox's lock.
type host struct {
	d    *Driver
	spec sandbox.Spec
	lock *hostlock.Lock
	cid  string // the container's id, once it is made
	conn net.Conn
	// pid is the container's first process as this host sees it; 0 when
	// the engine runs elsewhere.
	pid int
	// group is the container's cgroup on this host, workload the agent's
	// workload group in it where the agent made one this host can see
	// (runc); nil otherwise.
	group, workload *cgroup.Group
	log             agentdriver.LogBuffer // the agent's standard error
	agentdriver.Lifecycle
	waitStop context.CancelFunc // stops watching the container; nil before

	closeOnce   sync.Once
	teardownErr error
}

var (
	_ agentdriver.Host         = (*host)(nil)
	_ agentdriver.HostDetacher = (*host)(nil)
	_ sandbox.UsageReader      = (*host)(nil)
)

func newHost(d *Driver, spec sandbox.Spec, lock *hostlock.Lock) *host {
	return &host{d: d, spec: spec, lock: lock}
}

// Exec: where the agent gives each exec a cgroup that this host sees (runc
// with cgroups inside), the exec's own group is read and killed from the
// host; otherwise the host sees the whole container only and kills go
// through the agent.
func (h *host) Exec(string) agentdriver.ExecHost {
	if h.workload != nil {
		// The agent's spawner thread passes through the exec's group.
		return agentdriver.PerExecCgroup(h.workload, h.pid)
	}
	return agentdriver.SandboxCgroupDelta(h.group)
}

// Usage reads the container's cgroup, which holds the agent (and a
// runtime's kernel) too.
func (h *host) Usage(context.Context) (sandbox.SandboxUsage, error) {
	return agentdriver.CgroupUsage(h.group, h.spec.Limits)
}

// layers are the isolation layers the engine put in place.
func (h *host) layers() []sandbox.Layer {
	l := []sandbox.Layer{sandbox.LayerPidNS, sandbox.LayerMountNS, sandbox.LayerNetNS, sandbox.LayerIPCNS,
		sandbox.LayerUTSNS, sandbox.LayerCgroupNS, sandbox.LayerCgroups}
	if strings.Contains(h.spec.Runtime, "runsc") {
		l = append(l, sandbox.LayerGVisor)
	}
	return l
}

// state is what a daemon keeps of a sandbox to reattach to it (Recover).
type state struct {
	Container string       `json:"container"`
	Spec      sandbox.Spec `json:"spec"`
	Instance  string       `json:"instance"`
	Created   time.Time    `json:"created"`
}

// DriverState is what a daemon keeps of the sandbox to reattach to it
// after a restart (Driver.Recover).
func (h *host) DriverState() ([]byte, error) {
	return json.Marshal(state{Container: h.cid, Spec: h.spec, Instance: h.d.opts.Instance, Created: h.created()})
}

// created is when the container was made, as the engine says.
func (h *host) created() time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := h.d.cli.ContainerInspect(ctx, h.cid, client.ContainerInspectOptions{})
	if err != nil {
		return time.Now()
	}
	t, err := time.Parse(time.RFC3339Nano, r.Container.Created)
	if err != nil {
		return time.Now()
	}
	return t
}

// start makes the container, attaches to it, starts it with the agent as
// its process, sends the agent cfg and performs the handshake.
func (h *host) start(ctx context.Context, cs containerSpec, cfg *agent.Config) (*agent.Client, []sandbox.Layer, error) {
	cli := h.d.cli
	ccfg, hc := cs.create()
	opts := client.ContainerCreateOptions{Config: ccfg, HostConfig: hc, Name: containerName(h.spec.ID)}
	resp, err := cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		// A container of this sandbox's name: it is a stale one, as this
		// process holds the sandbox's lock.
		if rerr := h.d.removeStale(ctx, containerName(h.spec.ID), h.spec.ID); rerr != nil {
			return nil, nil, rerr
		}
		resp, err = cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		if strings.Contains(err.Error(), "runtime") {
			// An unknown runtime: the engine's list says which it has.
			if info, ierr := h.d.engine(ctx); ierr == nil {
				if rerr := h.d.checkRuntime(info, cs.Runtime); rerr != nil {
					return nil, nil, rerr
				}
			}
		}
		return nil, nil, fmt.Errorf("create the container of sandbox %s: %w", h.spec.ID, err)
	}
	h.cid = resp.ID
	att, err := cli.ContainerAttach(ctx, h.cid, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, nil, fmt.Errorf("attach to the container of sandbox %s: %w", h.spec.ID, err)
	}
	h.conn = newStreamConn(att.Conn, att.Reader, &h.log)
	if err := h.watch(ctx, container.WaitConditionNextExit); err != nil {
		return nil, nil, err
	}
	if err := agent.WriteConfig(h.conn, cfg); err != nil {
		return nil, nil, fmt.Errorf("start the sandbox: %w", err)
	}
	if _, err := cli.ContainerStart(ctx, h.cid, client.ContainerStartOptions{}); err != nil {
		return nil, nil, h.startError(fmt.Errorf("start the container: %w", err))
	}
	return h.dial(ctx)
}

// dial performs the handshake with the agent over h.conn, and finds the
// container's cgroup meanwhile.
func (h *host) dial(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
	found := make(chan struct{})
	go func() {
		defer close(found)
		h.findCgroup(ctx)
	}()
	cl, layers, err := agentdriver.Handshake(ctx, h.conn, 30*time.Second)
	<-found
	if err != nil {
		return nil, nil, h.startError(err)
	}
	if h.group != nil && h.pid > 0 {
		// The agent's workload group, where it made one in the
		// container's own cgroup (not inside a runtime's kernel).
		if w := h.group.Child("workload"); w.Exists() {
			h.workload = w
		}
	}
	return cl, layers, nil
}

// findCgroup finds the container's cgroup on this host, where the engine
// runs here: the cgroup of the container's first process, which must name
// the container (an engine elsewhere has other processes of that pid).
func (h *host) findCgroup(ctx context.Context) {
	hier := h.d.hierarchy()
	if hier == nil {
		return
	}
	r, err := h.d.cli.ContainerInspect(ctx, h.cid, client.ContainerInspectOptions{})
	if err != nil || r.Container.State == nil || r.Container.State.Pid <= 0 {
		return
	}
	pid := r.Container.State.Pid
	rel := cgroupOf(pid, hier.V2)
	if rel == "" || !strings.Contains(rel, h.cid) {
		return
	}
	h.pid = pid
	h.group = hier.Open(strings.TrimPrefix(rel, "/"))
}

// cgroupOf returns the cgroup of pid in the memory hierarchy (v1) or the
// unified one (v2), as /proc says.
func cgroupOf(pid int, v2 bool) string {
	ms, err := cgroup.Of(pid)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if (v2 && m.V2) || (!v2 && m.Has("memory")) {
			return m.Path
		}
	}
	return ""
}

// watch starts waiting for the container to stop: the sandbox has ended.
// The wait outlives ctx; Teardown stops it.
func (h *host) watch(ctx context.Context, cond container.WaitCondition) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	res := h.d.cli.ContainerWait(wctx, h.cid, client.ContainerWaitOptions{Condition: cond})
	h.waitStop = cancel
	go func() {
		var why string
		select {
		case r := <-res.Result:
			why = "the container exited with code " + strconv.FormatInt(r.StatusCode, 10)
			if r.Error != nil && r.Error.Message != "" {
				why += ": " + r.Error.Message
			}
		case err := <-res.Error:
			why = "airlock lost the container: " + err.Error()
		}
		if !h.Closing.Load() {
			dt := h.deathCause(why)
			h.SetEnded(dt)
			h.d.rc.Logger.Warn("docker sandbox ended by itself", "sandbox_id", h.spec.ID, "reason", dt.Reason, "err", dt.Msg)
		}
		h.CloseDone()
	}()
	return nil
}

// Detach lets go of the container without ending it: this process stops
// watching it and drops its copy of the sandbox's lock, which a later
// process takes again when it reattaches (Driver.Recover).
func (h *host) Detach() {
	h.Closing.Store(true)
	if h.waitStop != nil {
		h.waitStop()
	}
	if h.lock != nil {
		h.lock.Drop()
	}
}

// deathCause reads why the container stopped: the engine's word on an
// out-of-memory kill, else the counters of its cgroup.
func (h *host) deathCause(why string) *agentdriver.Death {
	vm := contained.IsVMRuntime(h.spec.Runtime)
	if dt := agentdriver.CgroupDeath(h.group, h.spec.Limits, contained.Holder(vm), contained.Pids(h.spec.Limits, vm)); dt != nil {
		return dt
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r, err := h.d.cli.ContainerInspect(ctx, h.cid, client.ContainerInspectOptions{}); err == nil && r.Container.State != nil && r.Container.State.OOMKilled {
		return contained.OOMDeath(h.spec.Limits, vm)
	}
	return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: why + h.stderr()}
}

// startError explains why a sandbox did not start, with the agent's and
// the runtime's own words.
func (h *host) startError(err error) error {
	select {
	case <-h.Done():
	case <-time.After(time.Second):
	}
	return fmt.Errorf("start the sandbox: %w%s", err, h.stderr())
}

// stderr returns what the agent wrote to standard error, for an error
// message.
func (h *host) stderr() string {
	b := bytes.TrimSpace(h.log.Bytes())
	if len(b) == 0 {
		return ""
	}
	return ": " + string(b)
}

// Teardown removes the container (killing everything in it, and its
// anonymous volumes) and releases the sandbox's lock, whatever state the
// sandbox is in.
func (h *host) Teardown(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.Closing.Store(true)
		if h.conn != nil {
			h.conn.Close()
		}
		if h.group != nil {
			// A frozen container dies only once thawed.
			h.group.Thaw()
		}
		if h.cid != "" && !h.removedByEngine(ctx) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, err := h.d.cli.ContainerRemove(rctx, h.cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
			// The engine may be removing it already (a container that
			// is not persistent goes when its agent ends).
			if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				h.teardownErr = fmt.Errorf("remove the container of sandbox %s: %w", h.spec.ID, err)
			}
		}
		if h.waitStop != nil {
			select {
			case <-h.Done():
			case <-time.After(15 * time.Second):
				h.d.rc.Logger.Error("the container did not stop after its removal", "sandbox_id", h.spec.ID)
			}
			h.waitStop()
		}
		h.lock.Release()
		h.CloseDone()
		if h.teardownErr == nil && h.cid != "" && !h.gone(ctx) {
			h.teardownErr = fmt.Errorf("sandbox %s: its container %s is still there after close", h.spec.ID, h.cid)
		}
	})
	return h.teardownErr
}

// gone waits up to 10 s for the engine to have removed the container.
func (h *host) gone(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for {
		if _, err := h.d.cli.ContainerInspect(ctx, h.cid, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// removedByEngine lets a container that is not persistent end by itself,
// as `docker run --rm` does: its agent ends when its input closes (the
// connection is closed by now), killing every command, and the engine
// removes the container. It says whether that happened within 5 s;
// otherwise the caller removes it by force.
func (h *host) removedByEngine(ctx context.Context) bool {
	if h.d.rc.Persistent || h.conn == nil {
		return false
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	res := h.d.cli.ContainerWait(wctx, h.cid, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	select {
	case <-res.Result:
		return true
	case err := <-res.Error:
		return cerrdefs.IsNotFound(err)
	}
}
