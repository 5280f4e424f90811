package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Recover reattaches to the persistent sandbox id that another process
// made (see Options.Persistent), from the state its instance gave
// (DriverState). The agent answers on the sandbox's session socket; what
// answers is checked before anything is said to it: the sandbox's lock
// must be held, and the process listening must be in the sandbox's agent
// cgroup and run as the first uid of a sandbox's range (the one the state
// names). A sandbox whose lock is free is gone (ErrNotFound); one whose
// agent does not answer before ctx ends, or whose socket is not its
// agent's, is killed and removed.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (_ sandbox.Instance, err error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, sandbox.ErrInvalid)
	}
	if !d.opts.Persistent {
		return nil, &sandbox.UnsupportedError{What: "reattaching a native sandbox", Why: "this driver's sandboxes die with the process that made them", Fix: "make the driver with Options.Persistent (as airlock serve does)"}
	}
	var st state
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &st); err != nil || st.Spec.ID != id {
			return nil, fmt.Errorf("sandbox %s: %w: its driver state does not name it (%w)", id, sandbox.ErrInvalid, err)
		}
	}
	spec := st.Spec
	if spec.ID == "" {
		// A create that did not finish: enough to end it.
		spec = sandbox.Spec{ID: id}
	}
	spec.Limits = spec.Limits.WithDefaults()
	dir, err := agentdriver.SessionDir(d.opts.StateDir)
	if err != nil {
		return nil, err
	}
	h := &host{
		d: d, spec: spec, done: make(chan struct{}), persistent: true,
		sockPath: filepath.Join(dir, id+".sock"), logPath: filepath.Join(dir, id+".log"),
		agentPid: st.AgentPid, agentStart: st.AgentStart,
	}
	if d.hier != nil {
		h.group = d.hier.Open(d.opts.CgroupParent + "/" + id)
		h.agentGroup, h.workload = h.group.Child("agent"), h.group.Child("workload")
	}
	if l, lerr := hostlock.Sandbox(d.opts.StateDir, id); lerr == nil {
		// Nobody holds the sandbox's lock: its agent is gone, and with it
		// every process of the sandbox. Remove what is left.
		h.lock = l
		_ = h.Teardown(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("sandbox %s: %w: its agent has exited", id, sandbox.ErrNotFound)
	} else if !errors.Is(lerr, sandbox.ErrExists) {
		return nil, fmt.Errorf("sandbox %s: %w", id, lerr)
	}
	defer func() {
		if err != nil {
			// Whatever holds the sandbox but does not answer as its agent
			// is ended with everything in the sandbox's cgroup.
			_ = h.Teardown(context.WithoutCancel(ctx))
		}
	}()
	c, err := agentdriver.DialSession(ctx, h.sockPath, nil)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: its agent did not answer; it was ended: %w", id, err)
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if err := d.checkPeer(id, st, peer); err != nil {
		peer.Pidfd.Close()
		return nil, err
	}
	h.agentPid, h.base = peer.Pid, peer.UID
	if h.agentStart, err = procid.StartTime(peer.Pid); err != nil {
		peer.Pidfd.Close()
		return nil, fmt.Errorf("sandbox %s: read its agent's start: %w", id, err)
	}
	if h.watch, err = procid.WatchPidfd(peer.Pidfd, h.closeDone); err != nil {
		return nil, fmt.Errorf("sandbox %s: watch its agent: %w", id, err)
	}
	client, agentLayers, err := agent.Dial(ctx, h.conn)
	var verr *agent.VersionError
	if errors.As(err, &verr) {
		// Made by an airlock of another version: it runs on, and this
		// one can only end it.
		return agentdriver.NewMismatched(spec, h, verr), nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: its agent did not answer; it was ended: %w", id, err)
	}
	var eg *egress.Sandbox
	if spec.Network.Mode == sandbox.NetworkEgress {
		if eg, err = d.opts.Egress.Attach(id, spec.Network); err != nil {
			client.Close()
			return nil, fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	hostLayers, _ := d.layers(spec.AllowDegraded)
	return agentdriver.New(agentdriver.Config{
		Spec: spec, Client: client, Layers: append(hostLayers, agentLayers...),
		Host: h, Egress: eg, Logger: d.opts.Logger,
	}), nil
}

// checkPeer refuses a session socket whose listener is not sandbox id's
// agent: a socket someone else put there, or a stale one whose path was
// taken over.
func (d *Driver) checkPeer(id string, st state, peer procid.Peer) error {
	base := st.UIDBase
	if base == 0 {
		base = peer.UID
	}
	if peer.UID != base || !hostlock.IsRangeBase(base) {
		return fmt.Errorf("sandbox %s: refused its session socket: the process listening (pid %d) runs as uid %d, not as the sandbox's agent", id, peer.Pid, peer.UID)
	}
	if d.hier != nil && !procid.InCgroup(peer.Pid, d.opts.CgroupParent+"/"+id+"/agent") {
		return fmt.Errorf("sandbox %s: refused its session socket: the process listening (pid %d) is not in the sandbox's agent cgroup", id, peer.Pid)
	}
	return nil
}
