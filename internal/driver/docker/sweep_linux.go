package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
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
		for _, c := range list.Items {
			if c.Labels[labelFill] != "" {
				if time.Since(time.Unix(c.Created, 0)) > fillGrace {
					errs = append(errs, d.remove(ctx, c.ID))
				}
				continue
			}
			id := c.Labels[LabelSandbox]
			if !sandbox.ValidID(id) {
				continue
			}
			lock, err := hostlock.Sandbox(d.opts.StateDir, id)
			if err != nil {
				continue // alive, or not ours to judge
			}
			d.opts.Logger.Info("removing the container of a sandbox whose owner is gone", "sandbox_id", id, "container", c.ID)
			errs = append(errs, d.remove(ctx, c.ID))
			lock.Release()
		}
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
	d.opts.Logger.Info("removing a stale container of the same sandbox", "sandbox_id", id, "container", r.Container.ID)
	return d.remove(ctx, r.Container.ID)
}

// State returns what a daemon keeps of a Docker sandbox to reattach to it
// after a restart (Recover).
func State(inst sandbox.Instance) ([]byte, error) {
	if ai, ok := inst.(*agentdriver.Instance); ok {
		if h, ok := ai.Host().(*host); ok {
			return h.DriverState()
		}
	}
	return nil, fmt.Errorf("not a docker sandbox: %w", sandbox.ErrInvalid)
}

// Recover reattaches to sandbox id, a live container that another airlock
// process made (one that has exited, or been killed), from the state it
// kept (State). The agent, which outlives its sessions, is reached through
// a relay run in the container (agent.RelayArg); the new session closes
// the old one. Commands that ran on meanwhile go on; the sandbox's files
// and background processes are as they were.
func (d *Driver) Recover(ctx context.Context, id string, raw []byte) (_ sandbox.Instance, err error) {
	if !d.opts.Persistent {
		return nil, fmt.Errorf("sandbox %s: %w: only a persistent driver reattaches (Options.Persistent)", id, sandbox.ErrInvalid)
	}
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w: its driver state does not parse: %w", id, sandbox.ErrInvalid, err)
	}
	if st.Spec.ID != id || st.Container == "" {
		return nil, fmt.Errorf("sandbox %s: %w: its driver state names sandbox %q", id, sandbox.ErrInvalid, st.Spec.ID)
	}
	cli, err := d.client()
	if err != nil {
		return nil, err
	}
	if _, err := d.engine(ctx); err != nil {
		return nil, err
	}
	lock, err := hostlock.Sandbox(d.opts.StateDir, id)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, err)
	}
	h := newHost(d, st.Spec, lock)
	h.cid = st.Container
	defer func() {
		if err != nil {
			// The container is left as it is: a sweep judges it.
			h.closing.Store(true)
			if h.conn != nil {
				h.conn.Close()
			}
			if h.waitStop != nil {
				h.waitStop()
			}
			lock.Release()
		}
	}()
	r, err := cli.ContainerInspect(ctx, st.Container, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, fmt.Errorf("sandbox %s: %w: its container is gone", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: look at its container: %w", id, err)
	}
	if r.Container.Config == nil || r.Container.Config.Labels[LabelSandbox] != id {
		return nil, fmt.Errorf("sandbox %s: %w: container %s is not its own", id, sandbox.ErrInvalid, st.Container)
	}
	if r.Container.State == nil || !r.Container.State.Running {
		return nil, fmt.Errorf("sandbox %s: %w: its container has stopped", id, sandbox.ErrNotFound)
	}
	if err := h.watch(ctx, container.WaitConditionNotRunning); err != nil {
		return nil, err
	}
	ec, err := cli.ExecCreate(ctx, st.Container, client.ExecCreateOptions{
		User: "0:0", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Env: []string{"PATH=" + agentRelayDir}, Cmd: []string{agentName, agent.RelayArg, sessionSocket},
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: start a relay to its agent: %w", id, err)
	}
	ea, err := cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: attach to the relay to its agent: %w", id, err)
	}
	h.conn = newStreamConn(ea.Conn, ea.Reader, &h.log)
	cl, agentLayers, err := h.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: reattach: %w", id, err)
	}
	return agentdriver.NewReattached(agentdriver.Config{
		Spec: st.Spec, Client: cl, Layers: append(h.layers(), agentLayers...), Host: h, Logger: d.opts.Logger,
	}, d.opts.Egress, st.Created)
}
