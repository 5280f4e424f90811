package gvisor

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

// Recover reattaches to the persistent gVisor sandbox id that another
// process made (see Options.Persistent), from the state its instance gave
// (DriverState): `runsc run` still runs (the same process, by pid and
// start time), the sandbox's lock is held, and the socket's listener is in
// the sandbox's host cgroup. A sandbox whose lock is free is gone
// (ErrNotFound); one that does not answer before ctx ends, or whose socket
// is not its own, is killed and removed.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (_ sandbox.Instance, err error) {
	if !sandbox.ValidID(id) {
		return nil, fmt.Errorf("sandbox id %q: %w", id, sandbox.ErrInvalid)
	}
	if !d.opts.Persistent {
		return nil, &sandbox.UnsupportedError{What: "reattaching a gVisor sandbox", Why: "this driver's sandboxes die with the process that made them", Fix: "make the driver with Options.Persistent (as airlock serve does)"}
	}
	if d.runsc == nil {
		return nil, unsupported(d.runscErr.Error(), "build the pinned runsc with `make runsc`")
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
	bundle := filepath.Join(d.bundlesDir(), id)
	h := &host{
		d: d, spec: spec, bundle: bundle, done: make(chan struct{}), persistent: true,
		session: filepath.Join(bundle, "session"), logPath: filepath.Join(bundle, "log"),
		runscPid: st.RunscPid, runscStart: st.RunscStart,
	}
	if d.hier != nil {
		h.group = d.hier.Open(d.opts.CgroupParent + "/" + id)
	}
	if l, lerr := hostlock.Sandbox(d.opts.StateDir, id); lerr == nil {
		// Nobody holds the sandbox's lock: runsc is gone, and with it the
		// sandbox. Remove what is left.
		h.lock = l
		h.teardown()
		return nil, fmt.Errorf("sandbox %s: %w: gVisor has exited", id, sandbox.ErrNotFound)
	} else if !errors.Is(lerr, sandbox.ErrExists) {
		return nil, fmt.Errorf("sandbox %s: %w", id, lerr)
	}
	defer func() {
		if err != nil {
			// Whatever holds the sandbox but does not answer is ended with
			// everything in the sandbox's cgroup.
			h.teardown()
		}
	}()
	pidfd, err := procid.OpenPid(st.RunscPid, st.RunscStart)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: its runsc is not the one that made it; it was ended: %w", id, err)
	}
	if h.watch, err = procid.WatchPidfd(pidfd, func() { h.exited(nil) }); err != nil {
		return nil, fmt.Errorf("sandbox %s: watch its runsc: %w", id, err)
	}
	c, err := agentdriver.DialSession(ctx, h.sockPath(), h.done)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: its agent did not answer; it was ended: %w", id, err)
	}
	h.conn = c
	peer, err := procid.PeerOf(c)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	peer.Pidfd.Close()
	if err := h.checkPeer(peer); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	client, agentLayers, err := agent.Dial(ctx, c)
	stop()
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
