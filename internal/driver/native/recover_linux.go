package native

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
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
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (sandbox.Instance, error) {
	st, spec, err := agentdriver.DecodeState(d.rc, id, raw, func(st *state) *sandbox.Spec { return &st.Spec })
	if err != nil {
		return nil, err
	}
	dir, err := agentdriver.SessionDir(d.rc.StateDir)
	if err != nil {
		return nil, err
	}
	h := &host{
		d: d, spec: spec, done: make(chan struct{}), persistent: true, created: st.Created,
		sockPath: filepath.Join(dir, id+".sock"), logPath: filepath.Join(dir, id+".log"),
		agentPid: st.AgentPid, agentStart: st.AgentStart,
	}
	if d.hier != nil {
		h.group = d.hier.Open(d.rc.CgroupParent + "/" + id)
		h.agentGroup, h.workload = h.group.Child("agent"), h.group.Child("workload")
	}
	return d.rc.Reattach(ctx, id, agentdriver.Reattaching{
		Spec: spec, Created: st.Created, Host: h, HolderLocks: true,
		Lock:      func(l *hostlock.Lock) { h.lock = l },
		Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) { return d.reattach(ctx, h, st) },
	})
}

// reattach reaches sandbox h's agent on its session socket, checks that
// the process listening is its agent, watches it and performs the
// handshake.
func (d *Driver) reattach(ctx context.Context, h *host, st state) (*agent.Client, []sandbox.Layer, error) {
	id := h.spec.ID
	c, err := agentdriver.DialSession(ctx, h.sockPath, nil)
	if err != nil {
		return nil, nil, err
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err != nil {
		return nil, nil, err
	}
	if err := d.checkPeer(id, st, peer); err != nil {
		peer.Pidfd.Close()
		return nil, nil, err
	}
	h.agentPid, h.base = peer.Pid, peer.UID
	if h.agentStart, err = procid.StartTime(peer.Pid); err != nil {
		peer.Pidfd.Close()
		return nil, nil, fmt.Errorf("read its agent's start: %w", err)
	}
	if h.watch, err = procid.WatchPidfd(peer.Pidfd, h.closeDone); err != nil {
		return nil, nil, fmt.Errorf("watch its agent: %w", err)
	}
	client, agentLayers, err := h.dialAgent(ctx)
	if err != nil {
		return nil, nil, err
	}
	hostLayers, _ := d.layers(h.spec.AllowDegraded)
	return client, append(hostLayers, agentLayers...), nil
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
	if d.hier != nil && !procid.InCgroup(peer.Pid, d.rc.CgroupParent+"/"+id+"/agent") {
		return fmt.Errorf("sandbox %s: refused its session socket: the process listening (pid %d) is not in the sandbox's agent cgroup", id, peer.Pid)
	}
	return nil
}

// dialAgent performs the handshake on h's agent connection, which can
// then pass the agent a socket per exec (agent.DialLocal: decision 70). A
// sandbox with a network also gets the tunnel channel (its egress and
// exposed-port connections are handed to the host and spliced), which
// costs the host a third descriptor; one without keeps two (its
// connection and its agent's pidfd), and its exposed ports go through the
// agent connection's Dial streams (decisions 61 and 62).
func (h *host) dialAgent(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
	network := h.spec.Network.Mode != sandbox.NetworkNone && h.spec.Network.Mode != ""
	return agent.DialLocal(ctx, h.conn, network)
}
