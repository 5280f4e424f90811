package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/procid"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Recover reattaches to the persistent gVisor sandbox id that another
// process made (see Options.Persistent), from the state its instance gave
// (DriverState): `runsc run` still runs (the same process, by pid and
// start time), the sandbox's lock is held, and the socket's listener is in
// the sandbox's host cgroup. A sandbox whose lock is free is gone
// (ErrNotFound); one that does not answer before ctx ends, or whose socket
// is not its own, is killed and removed.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (sandbox.Instance, error) {
	st, spec, err := agentdriver.DecodeState(d.rc, id, raw, func(st *state) *sandbox.Spec { return &st.Spec })
	if err != nil {
		return nil, err
	}
	if d.runsc == nil {
		return nil, unsupported(d.runscErr.Error(), "build the pinned runsc with `make runsc`")
	}
	bundle := filepath.Join(d.bundlesDir(), id)
	if err := os.Remove(filepath.Join(bundle, pausedMark)); err == nil {
		// An airlock process died pausing it: if its checkpoint had not
		// begun, the agent had closed its session socket; have it listen
		// again. (Once checkpointed, runsc is gone: it is not found.)
		_, _ = d.runscCmd(10*time.Second, "kill", id, signalName(agent.ResumeSignal))
	}
	h := &host{
		d: d, spec: spec, bundle: bundle, persistent: true, created: st.Created,
		session: filepath.Join(bundle, "session"), logPath: filepath.Join(bundle, "log"),
		runscPid: st.RunscPid, runscStart: st.RunscStart,
	}
	if d.hier != nil {
		h.group = d.hier.Open(d.rc.CgroupParent + "/" + id)
	}
	return d.rc.Reattach(ctx, id, agentdriver.Reattaching{
		Spec: spec, Created: st.Created, Host: h, HolderLocks: true,
		Lock:      func(l *hostlock.Lock) { h.lock = l },
		Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) { return d.reattach(ctx, h, st) },
	})
}

// reattach finds sandbox h's runsc (the same process, by pid and start
// time) and watches it, reaches its agent on its session socket, checks
// that the socket's listener is in the sandbox's cgroup, and performs the
// handshake.
func (d *Driver) reattach(ctx context.Context, h *host, st state) (*agent.Client, []sandbox.Layer, error) {
	pidfd, err := procid.OpenPid(st.RunscPid, st.RunscStart)
	if err != nil {
		return nil, nil, fmt.Errorf("its runsc is not the one that made it: %w", err)
	}
	if h.watch, err = procid.WatchPidfd(pidfd, func() { h.exited(nil) }); err != nil {
		return nil, nil, fmt.Errorf("watch its runsc: %w", err)
	}
	c, err := agentdriver.DialSession(ctx, h.sockPath(), h.Done())
	if err != nil {
		return nil, nil, err
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err != nil {
		return nil, nil, err
	}
	peer.Pidfd.Close()
	if err := h.checkPeer(peer); err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	client, agentLayers, err := agent.Dial(ctx, c)
	stop()
	if err != nil {
		return nil, nil, err
	}
	hostLayers, _ := d.layers(h.spec.AllowDegraded)
	return client, append(hostLayers, agentLayers...), nil
}
