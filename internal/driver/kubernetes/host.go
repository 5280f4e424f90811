package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// host is one Pod sandbox seen from airlock: its Pod, whose only process
// is the agent, talking over the Pod's attach stream (or, after a
// reattach, a relay's exec stream); the sandbox's lock. airlock sees no
// cgroup of the Pod (it may run on another machine): commands are
// measured and killed through the agent.
type host struct {
	d    *Driver
	k    *kclient
	spec sandbox.Spec
	lock *hostlock.Lock
	name string    // the Pod's name
	uid  types.UID // the Pod's uid, once it is made
	conn *streamConn
	log  agentdriver.LogBuffer // the agent's standard error

	running  chan struct{} // closed once the container runs
	runOnce  sync.Once
	done     chan struct{}
	doneOnce sync.Once
	stop     context.CancelFunc // stops watching the Pod; nil before

	// closing is set once Teardown begins: from then on the sandbox does
	// not end by itself.
	closing atomic.Bool
	mu      sync.Mutex
	ended   *agentdriver.Death
	// streamEnded says ended came from the stream's end, before the
	// kubelet said why (its word replaces it).
	streamEnded bool
	created     time.Time
	// pulling is the image the node pulls for the Pod, from its events
	// ("" when it pulls none); pullErr, why it could not, from the
	// container's state.
	pulling string
	pullErr error

	closeOnce   sync.Once
	teardownErr error
}

var (
	_ agentdriver.Host         = (*host)(nil)
	_ agentdriver.HostDetacher = (*host)(nil)
)

func newHost(d *Driver, k *kclient, spec sandbox.Spec, lock *hostlock.Lock) *host {
	return &host{d: d, k: k, spec: spec, lock: lock, name: podName(spec.ID),
		running: make(chan struct{}), done: make(chan struct{})}
}

// Exec: airlock sees no cgroup of the Pod; kills and measures go through
// the agent.
func (h *host) Exec(string) agentdriver.ExecHost { return agentdriver.SandboxCgroupDelta(nil) }

func (h *host) Done() <-chan struct{} { return h.done }

// Ended says why the sandbox died, once it has.
func (h *host) Ended() *agentdriver.Death {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// layers are the isolation layers the runtime put in place.
func (h *host) layers() []sandbox.Layer {
	return layersOf(strings.Contains(h.spec.Runtime, "gvisor") || strings.Contains(h.spec.Runtime, "runsc"))
}

// state is what a daemon keeps of a sandbox to reattach to it (Recover).
type state struct {
	Pod       string       `json:"pod"`
	UID       types.UID    `json:"uid"`
	Namespace string       `json:"namespace"`
	Spec      sandbox.Spec `json:"spec"`
	Instance  string       `json:"instance"`
	Created   time.Time    `json:"created"`
}

// DriverState is what a daemon keeps of the sandbox to reattach to it
// after a restart (Driver.Recover); nil for a sandbox that dies with its
// process.
func (h *host) DriverState() ([]byte, error) {
	if !h.d.rc.Persistent {
		return nil, nil
	}
	return json.Marshal(state{Pod: h.name, UID: h.uid, Namespace: h.d.opts.Namespace, Spec: h.spec, Instance: h.d.opts.Instance, Created: h.created})
}

// createPod creates the Pod (makePod: with secret, its pull Secret, when
// set), replacing a stale one of the same sandbox (this process holds the
// sandbox's lock, so nobody owns it), and starts watching it.
func (h *host) createPod(ctx context.Context, pod *corev1.Pod, secret *corev1.Secret) error {
	got, err := h.d.makePod(ctx, h.k, pod.DeepCopy(), secret)
	if isConflict(err) {
		if rerr := h.d.removeStale(ctx, h.name, h.spec.ID); rerr != nil {
			return rerr
		}
		got, err = h.d.makePod(ctx, h.k, pod.DeepCopy(), secret)
	}
	if err != nil {
		return fmt.Errorf("create the Pod of sandbox %s in namespace %s: %w", h.spec.ID, h.d.opts.Namespace, err)
	}
	h.uid = got.UID
	h.created = got.CreationTimestamp.Time
	h.watch(ctx, got)
	return nil
}

// attach waits for the container to run, attaches to it, sends the agent
// cfg and performs the handshake.
func (h *host) attach(ctx context.Context, cfg *agent.Config) (*agent.Client, []sandbox.Layer, error) {
	select {
	case <-h.running:
	case <-h.done:
		if err := h.pullFailure(); err != nil {
			return nil, nil, err
		}
		return nil, nil, h.startError(fmt.Errorf("the Pod ended before its agent ran: %s", h.Ended().Msg))
	case <-ctx.Done():
		return nil, nil, h.startError(fmt.Errorf("the Pod did not run within %v: %s", h.d.opts.StartTimeout, h.waiting(ctx)))
	}
	conn, err := h.k.openStream(ctx, h.d.opts.Namespace, h.name, nil, &h.log)
	if err != nil {
		return nil, nil, h.startError(fmt.Errorf("attach to the Pod: %w", err))
	}
	h.conn = conn
	t0 := time.Now()
	// The write returns once the stream is open and has taken it.
	if err := agent.WriteConfig(conn, cfg); err != nil {
		return nil, nil, h.startError(err)
	}
	t1 := time.Now()
	go h.followStream(conn)
	cl, layers, err := h.dial(ctx)
	h.d.rc.Logger.Debug("attached to the agent", "sandbox_id", h.spec.ID, "attach", t1.Sub(t0), "setup_and_handshake", time.Since(t1))
	return cl, layers, err
}

// dial performs the handshake with the agent over h.conn.
func (h *host) dial(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
	cl, layers, err := agentdriver.Handshake(ctx, h.conn, 30*time.Second)
	if err != nil {
		return nil, nil, h.startError(err)
	}
	return cl, layers, nil
}

// waiting says what the Pod waits for, for an error message.
func (h *host) waiting(ctx context.Context) string {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p, err := h.k.getPod(gctx, h.d.opts.Namespace, h.name)
	if err != nil {
		return err.Error()
	}
	return describePod(p)
}

// describePod says what a Pod's conditions and container report.
func describePod(p *corev1.Pod) string {
	parts := []string{"phase " + string(p.Status.Phase)}
	if p.Status.Reason != "" {
		parts = append(parts, p.Status.Reason+": "+p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("container waiting: %s: %s", s.State.Waiting.Reason, s.State.Waiting.Message))
		case s.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container terminated: exit %d, %s: %s", s.State.Terminated.ExitCode, s.State.Terminated.Reason, s.State.Terminated.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// watch follows the Pod from what its creation returned: it closes
// running once the container runs, and ends the sandbox when the Pod
// ends or goes. The watch outlives ctx; Teardown stops it.
func (h *host) watch(ctx context.Context, pod *corev1.Pod) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.stop = cancel
	go func() {
		rv := pod.ResourceVersion
		if dt := h.observe(pod); dt != nil {
			h.end(dt)
			return
		}
		for wctx.Err() == nil {
			w, err := h.k.watchPods(wctx, h.d.opts.Namespace, metav1.ListOptions{
				FieldSelector: "metadata.name=" + h.name, ResourceVersion: rv, AllowWatchBookmarks: true,
			})
			if err != nil {
				if sleepCtx(wctx, time.Second) != nil {
					return
				}
				continue
			}
			dt, next := h.follow(wctx, w)
			w.Stop()
			if dt != nil {
				h.end(dt)
				return
			}
			if next == "" {
				// Too old a version: start again from the Pod as it is.
				p, err := h.k.getPod(wctx, h.d.opts.Namespace, h.name)
				if isNotFound(err) {
					h.end(&agentdriver.Death{Reason: sandbox.ReasonError, Msg: "the sandbox's Pod was deleted" + h.stderr()})
					return
				}
				if err != nil {
					if sleepCtx(wctx, time.Second) != nil {
						return
					}
					continue
				}
				if dt := h.observe(p); dt != nil {
					h.end(dt)
					return
				}
				next = p.ResourceVersion
			}
			rv = next
		}
	}()
}

// followPulls follows the kubelet's events about the Pod until ctx is
// done or the watch ends: "Pulling" names the image it pulls, and
// "Pulled", "Failed" or "BackOff" end that pull. Without the right to
// watch events (deploy's Role grants it), the API shows no pull.
func (h *host) followPulls(ctx context.Context) {
	w, err := h.k.watchEvents(ctx, h.d.opts.Namespace, h.uid)
	if err != nil {
		if ctx.Err() == nil {
			h.d.rc.Logger.Debug("the node's pull is not shown: cannot watch the Pod's events", "sandbox_id", h.spec.ID, "err", err)
		}
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			e, ok := ev.Object.(*corev1.Event)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			pulling := ""
			switch e.Reason {
			case "Pulling":
				pulling = quoted(e.Message, h.spec.Image)
			case "Pulled", "Failed", "BackOff", "ErrImageNeverPull", "InspectFailed":
			default:
				continue
			}
			h.mu.Lock()
			h.pulling = pulling
			h.mu.Unlock()
		}
	}
}

// quoted is the first quoted text of msg (the kubelet's `Pulling image
// "REF"`), or def.
func quoted(msg, def string) string {
	_, rest, ok := strings.Cut(msg, `"`)
	if !ok {
		return def
	}
	q, _, ok := strings.Cut(rest, `"`)
	if !ok || q == "" {
		return def
	}
	return q
}

// follow reads one watch until it ends; it returns why the sandbox ended
// (nil while it runs), and the resource version to go on from ("" to
// start again from a fresh read).
func (h *host) follow(ctx context.Context, w watch.Interface) (*agentdriver.Death, string) {
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return nil, rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, rv
			}
			switch ev.Type {
			case watch.Error:
				return nil, ""
			case watch.Deleted:
				if p, ok := ev.Object.(*corev1.Pod); ok && p.UID == h.uid {
					if dt := h.observe(p); dt != nil {
						return dt, rv
					}
					return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: "the sandbox's Pod was deleted" + h.stderr()}, rv
				}
			case watch.Added, watch.Modified, watch.Bookmark:
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type == watch.Bookmark || p.UID != h.uid {
					continue
				}
				if dt := h.observe(p); dt != nil {
					return dt, rv
				}
			}
		}
	}
}

// observe takes in the Pod's state: it says why the sandbox ended, or nil
// while it runs.
func (h *host) observe(p *corev1.Pod) *agentdriver.Death {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name != containerName {
			continue
		}
		if s.State.Running != nil {
			h.runOnce.Do(func() { close(h.running) })
		}
		if t := s.State.Terminated; t != nil {
			return h.deathOf(p, t)
		}
		if w := s.State.Waiting; w != nil && pullFailed(w.Reason) {
			err := fmt.Errorf("image %q: %w: the node could not pull it (%s: %s); check the image's name and tag, that the nodes reach its registry, and, for a private registry, the credentials the Pod pulls with ($AIRLOCK_KUBE_PULL_SECRETS, or $AIRLOCK_KUBE_PULL_CREDENTIALS=docker)",
				h.spec.Image, sandbox.ErrNotFound, w.Reason, w.Message)
			h.mu.Lock()
			h.pullErr = err
			h.mu.Unlock()
			return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: err.Error()}
		}
		if w := s.State.Waiting; w != nil && fatalWaiting(w.Reason) {
			return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: fmt.Sprintf("the Pod's container cannot start: %s: %s", w.Reason, w.Message)}
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return h.deathOf(p, nil)
	}
	return nil
}

// pullFailed says whether a container waiting for reason waits because
// the node could not pull its image. The kubelet would try again after a
// back-off (10 s, then doubling), but what fails a pull here (a name that
// is wrong, a registry that refuses the node's credentials or does not
// answer) seldom mends within a create's time: the create fails at once
// with the kubelet's words, and its caller may try again.
func pullFailed(reason string) bool {
	switch reason {
	case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable", "SignatureValidationFailed":
		return true
	}
	return false
}

// pullFailure is why the node could not pull the sandbox's image, if
// that is why it did not start.
func (h *host) pullFailure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pullErr
}

// fatalWaiting says whether a container waiting for reason never starts
// by itself.
func fatalWaiting(reason string) bool {
	switch reason {
	case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "ImageInspectError":
		return true
	}
	return false
}

// deathOf says why a Pod that ended ended: the kubelet's eviction, an
// out-of-memory kill, or the agent's exit.
func (h *host) deathOf(p *corev1.Pod, t *corev1.ContainerStateTerminated) *agentdriver.Death {
	if p.Status.Reason == "Evicted" {
		r := sandbox.ReasonKilled
		if strings.Contains(strings.ToLower(p.Status.Message), "memory") {
			r = sandbox.ReasonOOM
		}
		return &agentdriver.Death{Reason: r, Msg: "the node evicted the sandbox's Pod: " + p.Status.Message}
	}
	if t != nil && t.Reason == "OOMKilled" {
		return contained.OOMDeath(h.spec.Limits, contained.IsVMRuntime(h.spec.Runtime))
	}
	msg := "the sandbox's Pod ended: " + describePod(p)
	return &agentdriver.Death{Reason: sandbox.ReasonError, Msg: msg + h.stderr()}
}

// end records why the sandbox ended, unless it is being closed.
func (h *host) end(dt *agentdriver.Death) {
	if !h.closing.Load() {
		h.mu.Lock()
		first := h.ended == nil || h.streamEnded
		if first {
			h.ended, h.streamEnded = dt, false
		}
		h.mu.Unlock()
		if first {
			h.d.rc.Logger.Warn("kubernetes sandbox ended by itself", "sandbox_id", h.spec.ID, "reason", dt.Reason, "err", dt.Msg)
		}
	}
	h.doneOnce.Do(func() { close(h.done) })
}

// followStream ends the sandbox when the attach stream ends by itself: the
// container's standard output closed, so its first process, the agent,
// has ended, and every process of the container with it. The kubelet
// reports why about a second later (the Pod's watch), which then replaces
// this first word. (A stream that the kubelet cuts as idle, after its
// --streaming-connection-idle-timeout, ends the sandbox too: this host
// would have no way to it.)
func (h *host) followStream(c *streamConn) {
	<-c.Ended()
	if h.closing.Load() || c.closed.Load() {
		return
	}
	h.mu.Lock()
	if h.ended != nil {
		h.mu.Unlock()
		return
	}
	h.ended = &agentdriver.Death{Reason: sandbox.ReasonError, Msg: "the sandbox's agent ended (its stream closed)" + h.stderr()}
	h.streamEnded = true
	h.mu.Unlock()
	h.doneOnce.Do(func() { close(h.done) })
}

// startError explains why a sandbox did not start, with the agent's own
// words.
func (h *host) startError(err error) error {
	msg := h.stderr()
	if msg == "" && h.uid != "" {
		// The agent wrote to the container's log before anybody
		// attached, or failed before it could.
		select {
		case <-h.done:
		case <-time.After(2 * time.Second):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if l, lerr := h.k.podLog(ctx, h.d.opts.Namespace, h.name, 4096); lerr == nil && strings.TrimSpace(l) != "" {
			msg = ": the Pod's log: " + strings.TrimSpace(l)
		}
		if dt := h.Ended(); dt != nil {
			msg += " (" + dt.Msg + ")"
		}
	}
	return fmt.Errorf("start the sandbox: %w%s", err, msg)
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

// deleteGrace is the Pods' grace period at deletion: long enough that
// the Pod stays listed until the kubelet has stopped its container (zero
// would remove it from the API at once, before that).
const deleteGrace = 1

// Teardown deletes the Pod (the kubelet kills everything in it, and its
// volumes go with it), waits until it is gone, and releases the sandbox's
// lock, whatever state the sandbox is in.
func (h *host) Teardown(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.closing.Store(true)
		if h.conn != nil {
			h.conn.Close()
		}
		if h.uid != "" {
			h.teardownErr = h.d.deletePod(ctx, h.name, h.uid)
		}
		if h.stop != nil {
			h.stop()
		}
		h.lock.Release()
		h.doneOnce.Do(func() { close(h.done) })
	})
	return h.teardownErr
}

// Detach lets go of the sandbox without ending it: the Pod runs on, and
// a later airlock reattaches (Recover).
func (h *host) Detach() {
	h.closing.Store(true)
	if h.stop != nil {
		h.stop()
	}
	if h.conn != nil {
		h.conn.Close()
	}
	h.lock.Drop()
}

// deletePod deletes a Pod and waits until the kubelet has stopped it and
// the API server no longer has it.
func (d *Driver) deletePod(ctx context.Context, name string, uid types.UID) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	k, err := d.client()
	if err != nil {
		return err
	}
	if err := k.deletePod(ctx, d.opts.Namespace, name, deleteGrace, uid); err != nil && !isNotFound(err) && !isConflict(err) {
		return fmt.Errorf("delete Pod %s: %w", name, err)
	}
	for {
		p, err := k.getPod(ctx, d.opts.Namespace, name)
		if isNotFound(err) || (err == nil && p.UID != uid) {
			return nil
		}
		if sleepCtx(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("Pod %s is still there a minute after its deletion", name)
		}
	}
}
