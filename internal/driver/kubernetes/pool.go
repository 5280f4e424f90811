package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Warm pools: Pods made ahead of their sandboxes, whose agent has built
// the sandbox from the pool's configuration and waits for the sandbox's
// own (agent.Config.Template: host name, environment, egress). A create
// whose image, runtime class and limits fixed at the build (memory, CPU,
// /workspace, /tmp, pids) are a pool's claims one of its ready Pods by
// changing its labels (a patch that names the Pod's
// resource version, so that two airlocks sharing a pool never claim the
// same Pod), attaches to it and sends the agent the sandbox's own
// configuration (host name, environment, egress, limits the agent
// enforces); the pool then makes another. Pods of a pool carry no sandbox
// until claimed, so a sweep keeps them: they outlive a daemon's restart
// and serve the next one.

// Pool keeps Size Pods ready for sandboxes of one shape.
type Pool struct {
	// Name is the pool's label airlock.pool: a DNS label (lower case
	// letters, digits, "-"), at most 40 characters.
	Name string
	// Spec gives the shape: Image, Runtime (a RuntimeClass; empty means
	// Options.RuntimeClass), Limits (zero fields take the defaults) and
	// Home.
	// A create matches when those are the same after defaults.
	Spec sandbox.Spec
	// Size is how many ready Pods the pool keeps.
	Size int
}

// Labels of pool Pods.
const (
	// LabelPool holds the pool's name.
	LabelPool = "airlock.pool"
	// LabelState is "starting" while a pool's Pod starts and its agent
	// builds the sandbox, "warm" while it waits, "claimed" once a sandbox
	// has it.
	LabelState = "airlock.state"
)

// errNoWarm says a pool has no ready Pod now.
var errNoWarm = errors.New("no ready Pod in the pool")

// shape is what of a sandbox is fixed when its Pod is made and its agent
// builds it ahead.
type shape struct {
	image, runtime    string
	memory, disk, tmp int64
	cpuMilli          int64
	pids              int
	home              string // its agent binds it before the claim
}

// shapeOf is spec's shape, with the driver's defaults.
func (d *Driver) shapeOf(spec sandbox.Spec) shape {
	l := spec.Limits.WithDefaults()
	s := shape{image: spec.Image, runtime: spec.Runtime, memory: l.MemoryBytes, disk: l.DiskBytes, tmp: l.TmpBytes, cpuMilli: int64(l.CPUs * 1000), pids: l.Pids, home: spec.Home}
	if s.image == "" {
		s.image = d.opts.Image
	}
	if s.runtime == "" {
		s.runtime = d.opts.RuntimeClass
	}
	return s
}

// poolFor returns the pool whose shape spec has, or nil.
func (d *Driver) poolFor(spec sandbox.Spec) *Pool {
	want := d.shapeOf(spec)
	for i := range d.opts.Pools {
		if p := &d.opts.Pools[i]; p.Size > 0 && d.shapeOf(p.Spec) == want {
			return p
		}
	}
	return nil
}

// poolSelector selects the ready Pods of pool p made by this instance.
func (d *Driver) poolSelector(p *Pool) string {
	return LabelPool + "=" + p.Name + "," + LabelState + "=warm," + LabelDaemon + "=" + DaemonLabel(d.opts.Instance)
}

// poolMembers selects the Pods of pool p made by this instance that have
// no sandbox yet: starting or ready.
func (d *Driver) poolMembers(p *Pool) string {
	return LabelPool + "=" + p.Name + "," + LabelState + " in (starting,warm)," + LabelDaemon + "=" + DaemonLabel(d.opts.Instance)
}

// FillPools makes the Pods each pool lacks, and returns once they are
// made (not yet running). A daemon calls it at start; every claim refills
// its pool by itself.
func (d *Driver) FillPools(ctx context.Context) error {
	var errs []error
	for i := range d.opts.Pools {
		errs = append(errs, d.fill(ctx, &d.opts.Pools[i]))
	}
	return errors.Join(errs...)
}

// fill makes the Pods pool p lacks.
func (d *Driver) fill(ctx context.Context, p *Pool) error {
	d.fillMu.Lock()
	defer d.fillMu.Unlock()
	k, err := d.client()
	if err != nil {
		return err
	}
	list, err := k.listPods(ctx, d.opts.Namespace, d.poolMembers(p))
	if err != nil {
		return fmt.Errorf("pool %s: list its Pods: %w", p.Name, err)
	}
	have := 0
	for _, pod := range list.Items {
		switch {
		case pod.DeletionTimestamp != nil:
		case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded,
			// Left starting by an airlock that died meanwhile.
			pod.Labels[LabelState] == "starting" && time.Since(pod.CreationTimestamp.Time) > d.opts.StartTimeout+time.Minute:
			_ = k.deletePod(ctx, d.opts.Namespace, pod.Name, deleteGrace, pod.UID)
		default:
			have++
		}
	}
	for ; have < p.Size; have++ {
		pod, secret, cfg, err := d.poolPod(ctx, p)
		if err != nil {
			return err
		}
		made, err := d.makePod(ctx, k, pod, secret)
		if err != nil {
			return fmt.Errorf("pool %s: create a Pod: %w", p.Name, err)
		}
		go d.prepare(context.WithoutCancel(ctx), p, made, cfg)
	}
	return nil
}

// prepare waits for a new pool Pod to run, sends its agent the pool's
// configuration, with which it builds the sandbox and then waits for the
// sandbox's own, and marks the Pod ready. A Pod that does not get there is
// deleted. (A driver whose sandboxes die with their process closes the
// agent's input with the stream: its agent gets the whole configuration at
// the claim instead.)
func (d *Driver) prepare(ctx context.Context, p *Pool, pod *corev1.Pod, cfg *agent.Config) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.StartTimeout)
	defer cancel()
	k, err := d.client()
	if err != nil {
		return
	}
	err = func() error {
		for !containerRunning(pod) {
			if sleepCtx(ctx, 100*time.Millisecond) != nil {
				return fmt.Errorf("it did not run within %v: %s", d.opts.StartTimeout, describePod(pod))
			}
			if pod, err = k.getPod(ctx, d.opts.Namespace, pod.Name); err != nil {
				return err
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				return fmt.Errorf("it ended: %s", describePod(pod))
			}
			if imagePullFailed(pod) {
				return fmt.Errorf("its node could not pull its image: %s", describePod(pod))
			}
		}
		if d.rc.Persistent {
			var log agentdriver.LogBuffer
			conn, err := k.openStream(ctx, d.opts.Namespace, pod.Name, nil, &log)
			if err != nil {
				return fmt.Errorf("attach: %w", err)
			}
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			err = agent.WriteConfig(conn, cfg)
			if err == nil {
				// One byte says the sandbox is built.
				var b [1]byte
				_, err = io.ReadFull(conn, b[:])
				if err != nil {
					err = fmt.Errorf("the agent did not build the sandbox: %w: %s", err, bytes.TrimSpace(log.Bytes()))
				}
			}
			conn.Close()
			if err != nil {
				return err
			}
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"labels":          map[string]string{LabelState: "warm"},
		}})
		_, err := k.patchPod(ctx, d.opts.Namespace, pod.Name, patch)
		return err
	}()
	if err != nil {
		d.rc.Logger.Warn("a warm pool's Pod did not get ready: deleting it", "pool", p.Name, "pod", pod.Name, "err", err)
		_ = d.deletePod(context.WithoutCancel(ctx), pod.Name, pod.UID)
	}
}

// poolPod is a new Pod of pool p, a sandbox's without the sandbox, the
// Secret it pulls with (pullSecrets), and the configuration its agent
// builds the sandbox with.
func (d *Driver) poolPod(ctx context.Context, p *Pool) (*corev1.Pod, *corev1.Secret, *agent.Config, error) {
	spec := p.Spec
	spec.ID = "pool"
	spec.Limits = spec.Limits.WithDefaults()
	s := d.shapeOf(spec)
	spec.Image, spec.Runtime = s.image, s.runtime
	rc, err := d.runtimeClass(ctx, spec.Runtime)
	if err != nil {
		return nil, nil, nil, err
	}
	sum, err := agentbin.Sum()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the agent's binary: %w", err)
	}
	pod := d.podSpec(spec, rc, sum).pod(d.opts.Namespace)
	var secret *corev1.Secret
	if pod.Spec.ImagePullSecrets, secret, err = d.pullSecrets(spec.Image); err != nil {
		return nil, nil, nil, err
	}
	pod.Name = ""
	pod.GenerateName = "airlock-" + p.Name + "-"
	delete(pod.Labels, LabelSandbox)
	pod.Labels[LabelPool] = p.Name
	pod.Labels[LabelState] = "starting"
	cfg := agentConfig(spec, rc.vm, d.rc.Persistent)
	cfg.Template = true
	return pod, secret, cfg, nil
}

// claim takes a ready Pod of pool p for the sandbox of spec (with
// defaults and ID). It fails with errNoWarm when no Pod is ready; the pool
// refills in the background either way.
func (d *Driver) claim(ctx context.Context, k *kclient, p *Pool, spec sandbox.Spec) (*corev1.Pod, error) {
	defer func() {
		go func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := d.fill(fctx, p); err != nil {
				d.rc.Logger.Warn("refill a warm pool", "pool", p.Name, "err", err)
			}
		}()
	}()
	t0 := time.Now()
	list, err := k.listPods(ctx, d.opts.Namespace, d.poolSelector(p))
	if err != nil {
		return nil, fmt.Errorf("pool %s: list its Pods: %w", p.Name, err)
	}
	for i := range list.Items {
		c := &list.Items[i]
		if c.DeletionTimestamp != nil || !containerRunning(c) {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": c.ResourceVersion,
			"labels":          map[string]string{LabelState: "claimed", LabelSandbox: spec.ID},
		}})
		got, err := k.patchPod(ctx, d.opts.Namespace, c.Name, patch)
		if isConflict(err) || isNotFound(err) {
			continue // another claim had it first
		}
		if err != nil {
			return nil, fmt.Errorf("pool %s: claim Pod %s: %w", p.Name, c.Name, err)
		}
		d.rc.Logger.Debug("claimed a warm Pod", "pool", p.Name, "pod", got.Name, "sandbox_id", spec.ID, "list_and_patch", time.Since(t0))
		return got, nil
	}
	return nil, errNoWarm
}

// imagePullFailed says whether the node could not pull the image of the
// Pod's container (pullFailed).
func imagePullFailed(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == containerName && s.State.Waiting != nil && pullFailed(s.State.Waiting.Reason) {
			return true
		}
	}
	return false
}

// containerRunning says whether the Pod's container runs.
func containerRunning(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == containerName && s.State.Running != nil {
			return true
		}
	}
	return false
}
