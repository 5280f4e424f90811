package kubernetes

import (
	"context"

	"errors"
	"fmt"
	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

var (
	_ sandbox.Sweeper   = (*Driver)(nil)
	_ sandbox.Recoverer = (*Driver)(nil)
)

// Sweep deletes the Pods of sandboxes whose owner is gone: the Pods
// labelled with this driver's Instance whose sandbox lock no live process
// holds (a sandbox whose record is gone, or whose time ran out while its
// daemon was down: a daemon reattaches to its live sandboxes before it
// sweeps; a sandbox of a run that was killed). Pods of other instances
// are never touched: the label names the airlock that made them.
func (d *Driver) Sweep(ctx context.Context) error {
	k, err := d.client()
	if err != nil {
		return err
	}
	list, err := k.listPods(ctx, d.opts.Namespace, LabelDaemon+"="+DaemonLabel(d.opts.Instance))
	if err != nil {
		return fmt.Errorf("list airlock's Pods in namespace %s: %w", d.opts.Namespace, err)
	}
	pods := map[string][]corev1.Pod{}
	var ids []string
	for _, p := range list.Items {
		id := p.Labels[LabelSandbox]
		if p.Annotations[AnnotationDaemon] != d.opts.Instance || p.DeletionTimestamp != nil {
			continue
		}
		ids = append(ids, id)
		pods[id] = append(pods[id], p)
	}
	return hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
		var errs []error
		for _, p := range pods[id] {
			d.rc.Logger.Info("deleting the Pod of a sandbox whose owner is gone", "sandbox_id", id, "pod", p.Name)
			errs = append(errs, d.deletePod(ctx, p.Name, p.UID))
		}
		pods[id] = nil
		return errors.Join(errs...)
	})
}

// removeStale deletes the Pod called name, which must be one of airlock's
// for sandbox id: the caller holds id's lock, so nobody owns it.
func (d *Driver) removeStale(ctx context.Context, name, id string) error {
	k, err := d.client()
	if err != nil {
		return err
	}
	p, err := k.getPod(ctx, d.opts.Namespace, name)
	if err != nil {
		return fmt.Errorf("look at the Pod called %s: %w", name, err)
	}
	if p.Labels[LabelSandbox] != id {
		return fmt.Errorf("sandbox %s: %w: a Pod called %s that airlock did not make for it exists in namespace %s; delete it or pick another id", id, sandbox.ErrExists, name, d.opts.Namespace)
	}
	d.rc.Logger.Info("deleting a stale Pod of the same sandbox", "sandbox_id", id, "pod", name)
	return d.deletePod(ctx, name, p.UID)
}

// Recover reattaches to sandbox id, a live Pod that another airlock
// process made, from the state it kept (DriverState). The agent, which outlives
// its sessions, is reached through a relay run in the Pod with its exec
// stream (agent.RelayArg); the new session closes the old one. Commands
// that ran on meanwhile go on; the sandbox's files and background
// processes are as they were.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (sandbox.Instance, error) {
	st, spec, err := agentdriver.DecodeState(d.rc, id, raw, func(st *state) *sandbox.Spec { return &st.Spec })
	if err != nil {
		return nil, err
	}
	k, err := d.client()
	if err != nil {
		return nil, err
	}
	if st.Pod != "" && st.Namespace != d.opts.Namespace {
		return nil, fmt.Errorf("sandbox %s: %w: its Pod is in namespace %s, this driver's is %s", id, sandbox.ErrInvalid, st.Namespace, d.opts.Namespace)
	}
	h := newHost(d, k, spec, nil)
	h.created = st.Created
	return d.rc.Reattach(ctx, id, agentdriver.Reattaching{
		Spec: spec, Created: st.Created, Host: h,
		Lock:      func(l *hostlock.Lock) { h.lock = l },
		Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) { return d.reattach(ctx, h, st) },
	})
}

// reattach finds sandbox h's Pod, which must be its own and run, watches
// it, and reaches the agent through a relay in it.
func (d *Driver) reattach(ctx context.Context, h *host, st state) (*agent.Client, []sandbox.Layer, error) {
	id := h.spec.ID
	if st.Pod == "" {
		// A create that did not finish: its Pod, if any, is a sweep's to
		// delete.
		return nil, nil, fmt.Errorf("sandbox %s: %w: its state names no Pod", id, sandbox.ErrNotFound)
	}
	p, err := h.k.getPod(ctx, d.opts.Namespace, st.Pod)
	if isNotFound(err) {
		return nil, nil, fmt.Errorf("sandbox %s: %w: its Pod is gone", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("look at its Pod: %w", err)
	}
	if p.Labels[LabelSandbox] != id || (st.UID != "" && p.UID != st.UID) {
		// Not this sandbox's: not this sandbox's to delete either.
		return nil, nil, fmt.Errorf("sandbox %s: %w: Pod %s is not its own", id, sandbox.ErrNotFound, st.Pod)
	}
	h.uid = p.UID
	h.watch(ctx, p)
	select {
	case <-h.running:
	case <-h.done:
		return nil, nil, fmt.Errorf("sandbox %s: %w: its Pod has ended: %s", id, sandbox.ErrNotFound, h.Ended().Msg)
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("its Pod does not run: %w", ctx.Err())
	}
	conn, err := h.k.openStream(ctx, d.opts.Namespace, st.Pod, []string{contained.AgentRelayBin, agent.RelayArg, contained.SessionSocket}, &h.log)
	if err != nil {
		return nil, nil, fmt.Errorf("start a relay to its agent: %w", err)
	}
	h.conn = conn
	cl, agentLayers, err := h.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cl, append(h.layers(), agentLayers...), nil
}
