package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
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
	var errs []error
	for _, p := range list.Items {
		id := p.Labels[LabelSandbox]
		if !sandbox.ValidID(id) || p.Annotations[AnnotationDaemon] != d.opts.Instance || p.DeletionTimestamp != nil {
			continue
		}
		lock, err := hostlock.Sandbox(d.opts.StateDir, id)
		if err != nil {
			continue // alive, or not ours to judge
		}
		d.opts.Logger.Info("deleting the Pod of a sandbox whose owner is gone", "sandbox_id", id, "pod", p.Name)
		errs = append(errs, d.deletePod(ctx, p.Name, p.UID))
		lock.Release()
	}
	return errors.Join(errs...)
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
	d.opts.Logger.Info("deleting a stale Pod of the same sandbox", "sandbox_id", id, "pod", name)
	return d.deletePod(ctx, name, p.UID)
}

// State returns what a daemon keeps of a Kubernetes sandbox to reattach
// to it after a restart (Recover).
func State(inst sandbox.Instance) ([]byte, error) {
	if ai, ok := inst.(*agentdriver.Instance); ok {
		if h, ok := ai.Host().(*host); ok {
			return h.DriverState()
		}
	}
	return nil, fmt.Errorf("not a kubernetes sandbox: %w", sandbox.ErrInvalid)
}

// Recover reattaches to sandbox id, a live Pod that another airlock
// process made, from the state it kept (State). The agent, which outlives
// its sessions, is reached through a relay run in the Pod with its exec
// stream (agent.RelayArg); the new session closes the old one. Commands
// that ran on meanwhile go on; the sandbox's files and background
// processes are as they were.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (_ sandbox.Instance, err error) {
	if !d.opts.Persistent {
		return nil, fmt.Errorf("sandbox %s: %w: only a persistent driver reattaches (Options.Persistent)", id, sandbox.ErrInvalid)
	}
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w: its driver state does not parse: %w", id, sandbox.ErrInvalid, err)
	}
	if st.Spec.ID != id || st.Pod == "" {
		return nil, fmt.Errorf("sandbox %s: %w: its driver state names sandbox %q", id, sandbox.ErrInvalid, st.Spec.ID)
	}
	if st.Namespace != d.opts.Namespace {
		return nil, fmt.Errorf("sandbox %s: %w: its Pod is in namespace %s, this driver's is %s", id, sandbox.ErrInvalid, st.Namespace, d.opts.Namespace)
	}
	k, err := d.client()
	if err != nil {
		return nil, err
	}
	lock, err := hostlock.Sandbox(d.opts.StateDir, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	h := newHost(d, k, st.Spec, lock)
	h.created = st.Created
	defer func() {
		if err != nil {
			// The Pod is left as it is: a sweep judges it.
			h.closing.Store(true)
			if h.conn != nil {
				h.conn.Close()
			}
			if h.stop != nil {
				h.stop()
			}
			lock.Release()
		}
	}()
	p, err := k.getPod(ctx, d.opts.Namespace, st.Pod)
	if isNotFound(err) {
		return nil, fmt.Errorf("sandbox %s: %w: its Pod is gone", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: look at its Pod: %w", id, err)
	}
	if p.Labels[LabelSandbox] != id || (st.UID != "" && p.UID != st.UID) {
		return nil, fmt.Errorf("sandbox %s: %w: Pod %s is not its own", id, sandbox.ErrNotFound, st.Pod)
	}
	h.uid = p.UID
	h.watch(ctx, p)
	select {
	case <-h.running:
	case <-h.done:
		return nil, fmt.Errorf("sandbox %s: %w: its Pod has ended: %s", id, sandbox.ErrNotFound, h.Ended().Msg)
	case <-ctx.Done():
		return nil, fmt.Errorf("sandbox %s: its Pod does not run: %w", id, ctx.Err())
	}
	conn, err := k.openStream(ctx, d.opts.Namespace, st.Pod, []string{agentRelayBin, agent.RelayArg, sessionSocket}, &h.log)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: start a relay to its agent: %w", id, err)
	}
	h.conn = conn
	cl, agentLayers, err := h.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: reattach: %w", id, err)
	}
	return agentdriver.NewReattached(agentdriver.Config{
		Spec: st.Spec, Client: cl, Layers: append(h.layers(), agentLayers...), Host: h, Logger: d.opts.Logger,
	}, d.opts.Egress, st.Created)
}
