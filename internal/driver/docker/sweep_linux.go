package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// fillGrace is how old a container that fills the agent's volume must be
// before a sweep takes it for a leftover.
const fillGrace = 5 * time.Minute

// Sweep removes the containers of sandboxes whose owner is gone, with
// their anonymous volumes: the containers labelled with this driver's
// Instance, or with this host's one-shot runs', whose sandbox lock no live
// process holds (a sandbox of a record that is gone, or whose time ran out
// while its daemon was down: a daemon reattaches to its live sandboxes
// before it sweeps; a sandbox of a run that was killed). It also removes
// what filling the agent's volume left, and the volumes of other agent
// versions that no container uses.
func (d *Driver) Sweep(ctx context.Context) error {
	cli, err := d.client()
	if err != nil {
		return err
	}
	instances := []string{d.opts.Instance}
	if name, err := os.Hostname(); err == nil && RunInstance(name) != d.opts.Instance {
		instances = append(instances, RunInstance(name))
	}
	var errs []error
	for _, inst := range instances {
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelDaemon+"="+inst)})
		if err != nil {
			return fmt.Errorf("list airlock's containers: %w", err)
		}
		byID := map[string][]string{}
		var ids []string
		for _, c := range list.Items {
			if c.Labels[labelFill] != "" {
				if time.Since(time.Unix(c.Created, 0)) > fillGrace {
					errs = append(errs, d.remove(ctx, c.ID))
				}
				continue
			}
			id := c.Labels[LabelSandbox]
			ids = append(ids, id)
			byID[id] = append(byID[id], c.ID)
		}
		errs = append(errs, hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
			var errs []error
			for _, cid := range byID[id] {
				d.rc.Logger.Info("removing the container of a sandbox whose owner is gone", "sandbox_id", id, "container", cid)
				errs = append(errs, d.remove(ctx, cid))
			}
			byID[id] = nil
			return errors.Join(errs...)
		}))
	}
	errs = append(errs, d.sweepAgentVolumes(ctx, cli))
	return errors.Join(errs...)
}

// sweepAgentVolumes removes the volumes of agents other than this one's
// that no container uses.
func (d *Driver) sweepAgentVolumes(ctx context.Context, cli *client.Client) error {
	_, sum, err := agentSum()
	if err != nil {
		return nil
	}
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).Add("label", LabelAgent)})
	if err != nil {
		return fmt.Errorf("list the agent's volumes: %w", err)
	}
	for _, v := range vols.Items {
		if v.Labels[LabelAgent] == sum {
			continue
		}
		// A volume in use is refused: a sandbox of another airlock runs.
		_, _ = cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{})
	}
	return nil
}

// remove removes a container, running or not, with its anonymous volumes.
func (d *Driver) remove(ctx context.Context, cid string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.cli.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", cid, err)
	}
	return nil
}

// removeStale removes the container called name, which must be one of
// airlock's for sandbox id: the caller holds id's lock, so nobody owns it.
func (d *Driver) removeStale(ctx context.Context, name, id string) error {
	r, err := d.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("look at the container called %s: %w", name, err)
	}
	if r.Container.Config == nil || r.Container.Config.Labels[LabelSandbox] != id {
		return fmt.Errorf("sandbox %s: %w: a container called %s that airlock did not make for it exists; remove it or pick another id", id, sandbox.ErrExists, name)
	}
	d.rc.Logger.Info("removing a stale container of the same sandbox", "sandbox_id", id, "container", r.Container.ID)
	return d.remove(ctx, r.Container.ID)
}

// Recover reattaches to sandbox id, a live container that another airlock
// process made (one that has exited, or been killed), from the state it
// kept (DriverState). The agent, which outlives its sessions, is reached through
// a relay run in the container (agent.RelayArg); the new session closes
// the old one. Commands that ran on meanwhile go on; the sandbox's files
// and background processes are as they were.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (sandbox.Instance, error) {
	st, spec, err := agentdriver.DecodeState(d.rc, id, raw, func(st *state) *sandbox.Spec { return &st.Spec })
	if err != nil {
		return nil, err
	}
	if _, err := d.client(); err != nil {
		return nil, err
	}
	if _, err := d.engine(ctx); err != nil {
		return nil, err
	}
	h := newHost(d, spec, nil)
	return d.rc.Reattach(ctx, id, agentdriver.Reattaching{
		Spec: spec, Created: st.Created, Host: h,
		Lock: func(l *hostlock.Lock) { h.lock = l },
		Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
			return d.reattach(ctx, h, st.Container)
		},
	})
}

// reattach finds sandbox h's container, which must be its own and run,
// watches it, and reaches the agent through a relay in it.
func (d *Driver) reattach(ctx context.Context, h *host, cid string) (*agent.Client, []sandbox.Layer, error) {
	id := h.spec.ID
	if cid == "" {
		// A create that did not finish: its container, if any, is a
		// sweep's to remove.
		return nil, nil, fmt.Errorf("sandbox %s: %w: its state names no container", id, sandbox.ErrNotFound)
	}
	r, err := d.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil, fmt.Errorf("sandbox %s: %w: its container is gone", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("look at its container: %w", err)
	}
	if r.Container.Config == nil || r.Container.Config.Labels[LabelSandbox] != id {
		// Not this sandbox's: not this sandbox's to remove either.
		return nil, nil, fmt.Errorf("sandbox %s: %w: container %s is not its own", id, sandbox.ErrNotFound, cid)
	}
	h.cid = cid
	if r.Container.State == nil || !r.Container.State.Running {
		return nil, nil, fmt.Errorf("sandbox %s: %w: its container has stopped", id, sandbox.ErrNotFound)
	}
	if err := h.watch(ctx, container.WaitConditionNotRunning); err != nil {
		return nil, nil, err
	}
	ec, err := d.cli.ExecCreate(ctx, cid, client.ExecCreateOptions{
		User: "0:0", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: []string{"PATH=" + contained.AgentRelayDir}, Cmd: []string{contained.AgentName, agent.RelayArg, contained.SessionSocket},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("start a relay to its agent: %w", err)
	}
	ea, err := d.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("attach to the relay to its agent: %w", err)
	}
	h.conn = newStreamConn(ea.Conn, ea.Reader, &h.log)
	cl, agentLayers, err := h.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cl, append(h.layers(), agentLayers...), nil
}
