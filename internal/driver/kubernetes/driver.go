package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Driver runs sandboxes as Pods of a Kubernetes cluster.
type Driver struct {
	opts Options
	rc   *agentdriver.Recipe

	cliOnce sync.Once
	cli     *kclient
	cliErr  error

	mu      sync.Mutex
	classes map[string]runtimeClass // what each RuntimeClass is, once asked
	server  string                  // the API server's version, once it answered
	present []string                // the cluster's RuntimeClasses, once listed
	// starting are the hosts of the sandboxes being created, by id
	// (PullOf).
	starting map[string]*host

	// fillMu serialises the fills of the pools, so that two claims do not
	// both make the Pod a pool lacks.
	fillMu sync.Mutex
}

// runtimeClass is what the driver knows of a RuntimeClass.
type runtimeClass struct {
	handler string
	vm      bool
}

var (
	_ sandbox.Driver    = (*Driver)(nil)
	_ sandbox.Describer = (*Driver)(nil)
)

// New returns a Kubernetes driver. It does no I/O: the cluster is first
// asked by Probe or Create.
func New(opts Options) (*Driver, error) {
	if opts.RuntimeClass == "" {
		opts.RuntimeClass = DefaultRuntimeClass
	}
	if opts.CPURequest <= 0 || opts.CPURequest > 1 {
		opts.CPURequest = 0.1
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	switch corev1.PullPolicy(opts.ImagePullPolicy) {
	case "":
		opts.ImagePullPolicy = string(corev1.PullIfNotPresent)
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return nil, fmt.Errorf("%w: image pull policy %q: use Always, IfNotPresent or Never", sandbox.ErrInvalid, opts.ImagePullPolicy)
	}
	if opts.Instance == "" {
		opts.Instance = RunInstance(hostnameOr("localhost"))
	}
	d := &Driver{opts: opts, classes: map[string]runtimeClass{}}
	rc, err := agentdriver.NewRecipe("kubernetes", opts.shared(), false, d.Sweep)
	if err != nil {
		return nil, err
	}
	rc.SweepBeside, d.rc = true, rc
	return d, nil
}

// Name is "kubernetes".
func (d *Driver) Name() string { return "kubernetes" }

// Namespace is where the driver makes its Pods, once it has read its
// configuration (Probe, Create).
func (d *Driver) Namespace() string { return d.opts.Namespace }

// Instance is the Instance whose hash labels the driver's Pods.
func (d *Driver) Instance() string { return d.opts.Instance }

// client returns the API server's client, made on first use.
func (d *Driver) client() (*kclient, error) {
	d.cliOnce.Do(func() {
		routeKlog(d.rc.Logger)
		cfg, ns, err := loadConfig(d.opts)
		if err != nil {
			d.cliErr = unsupported(err.Error(), "give --kubeconfig FILE (or set KUBECONFIG), or run airlock in a Pod with a service account")
			return
		}
		if d.opts.Namespace == "" {
			d.opts.Namespace = ns
		}
		if d.opts.Namespace == "" {
			d.opts.Namespace = DefaultNamespace
		}
		d.cli, d.cliErr = newKClient(cfg)
	})
	return d.cli, d.cliErr
}

// klogOnce routes client-go's own log (klog, a global of client-go: the
// streams' "use of closed network connection" when a sandbox closes, …)
// to the first driver's logger instead of standard error.
var klogOnce sync.Once

func routeKlog(l *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(l.With("component", "client-go")) })
}

// probeTimeout bounds Probe's questions to the API server.
var probeTimeout = 15 * time.Second

// Probe checks that the API server answers, that the driver may make,
// attach to and delete Pods in its namespace, and that the default
// RuntimeClass exists.
func (d *Driver) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	k, err := d.client()
	if err != nil {
		return err
	}
	v, err := k.version(ctx)
	if err != nil {
		return unsupported(fmt.Sprintf("the API server at %s does not answer: %v", k.config.Host, err), "check the kubeconfig's server address and that the cluster runs")
	}
	d.mu.Lock()
	d.server = v
	d.mu.Unlock()
	for _, p := range Permissions {
		ok, why, err := k.allowed(ctx, d.opts.Namespace, p.Verb, p.Resource, p.Subresource)
		if err != nil {
			return unsupported(fmt.Sprintf("ask the API server what airlock may do: %v", err), "grant airlock's service account the Role in deploy/kubernetes")
		}
		if !ok {
			return unsupported(fmt.Sprintf("airlock may not %s in namespace %s (%s)", p, d.opts.Namespace, why),
				"grant it the Role in deploy/kubernetes/rbac.yaml (pods create/get/list/watch/delete/patch, pods/attach and pods/exec create, pods/log get), in that namespace")
		}
	}
	if list, err := k.listRuntimeClasses(ctx); err == nil {
		var have []string
		for _, c := range list.Items {
			have = append(have, c.Name+" (handler "+c.Handler+")")
		}
		d.mu.Lock()
		d.present = have
		d.mu.Unlock()
	}
	_, err = d.runtimeClass(ctx, d.opts.RuntimeClass)
	return err
}

// Permission is one thing the driver must be allowed in its namespace.
type Permission struct {
	Verb, Resource, Subresource string
}

func (p Permission) String() string {
	if p.Subresource != "" {
		return p.Verb + " " + p.Resource + "/" + p.Subresource
	}
	return p.Verb + " " + p.Resource
}

// Permissions is what the driver needs in its namespace (deploy's Role).
var Permissions = []Permission{
	{"create", "pods", ""}, {"get", "pods", ""}, {"list", "pods", ""}, {"watch", "pods", ""},
	{"delete", "pods", ""}, {"patch", "pods", ""}, {"create", "pods", "attach"}, {"create", "pods", "exec"}, {"get", "pods", "log"},
}

// runtimeClass says what a RuntimeClass is, asking the API server once.
// RuntimeClassNone (or "default") is the node's default runtime.
func (d *Driver) runtimeClass(ctx context.Context, name string) (runtimeClass, error) {
	if name == RuntimeClassNone || name == "default" {
		return runtimeClass{}, nil
	}
	d.mu.Lock()
	rc, ok := d.classes[name]
	d.mu.Unlock()
	if ok {
		return rc, nil
	}
	k, err := d.client()
	if err != nil {
		return rc, err
	}
	c, err := k.getRuntimeClass(ctx, name)
	switch {
	case err == nil:
		rc = runtimeClass{handler: c.Handler, vm: contained.IsVMRuntime(name, c.Handler)}
	case isForbidden(err):
		// RuntimeClasses are cluster-wide, which a namespaced Role does
		// not cover: the name tells.
		rc = runtimeClass{vm: contained.IsVMRuntime(name)}
	case isNotFound(err):
		have := []string{RuntimeClassNone}
		if list, lerr := k.listRuntimeClasses(ctx); lerr == nil {
			for _, c := range list.Items {
				have = append(have, c.Name)
			}
		}
		return rc, &sandbox.UnsupportedError{
			What: "kubernetes runtime class " + name,
			Why:  "the cluster has the runtime classes " + strings.Join(have, ", "),
			Fix:  "install the runtime on the nodes and create its RuntimeClass (gVisor: handler runsc), or pick one of those",
		}
	default:
		return rc, fmt.Errorf("look at runtime class %s: %w", name, err)
	}
	d.mu.Lock()
	d.classes[name] = rc
	d.mu.Unlock()
	return rc, nil
}

// Describe says which cluster the driver uses.
func (d *Driver) Describe() string {
	k, err := d.client()
	if err != nil {
		return "no Kubernetes cluster configured"
	}
	d.mu.Lock()
	v, present := d.server, d.present
	d.mu.Unlock()
	if v == "" {
		v = "(not reached)"
	}
	classes := ""
	if len(present) > 0 {
		classes = "; the cluster's runtime classes: " + strings.Join(present, ", ")
	}
	return fmt.Sprintf("Kubernetes %s at %s; namespace %s, runtime class %s for sandboxes%s", v, k.config.Host, d.opts.Namespace, d.opts.RuntimeClass, classes)
}

// Capabilities says what Pod sandboxes can do. The languages are those of
// the image; the suite's image has sh, bash and python3. Host paths are
// never mounted into Pods.
func (d *Driver) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Shell: true, Languages: []string{"sh", "bash", "python3"}, Files: true, Background: true,
		Egress: true, PTY: true, Snapshots: true, SurvivesRestart: d.rc.Persistent, Home: true,
		Images: true, NeedsImage: d.opts.Image == "",
		Lacks: map[sandbox.Capability]sandbox.Lack{
			sandbox.CapHostRoot:     {Why: "the kubernetes driver runs images, not a root directory of the host", Fix: "name an image instead (--image NAME, or image in the template)"},
			sandbox.CapHostMounts:   {Why: "a Pod never mounts paths of the node it runs on", Fix: "copy the files in with the file API, or use another driver"},
			sandbox.CapDefaultImage: {Why: "the kubernetes driver needs an image its nodes can pull", Fix: "give --image NAME (or image in the template)"},
		},
	}
}

// Create starts a sandbox: its Pod (a warm one of a pool of its shape, if
// one is ready), the agent over the attach stream, and the handshake.
// Anything made before an error is deleted again.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	return d.rc.Create(ctx, spec, agentdriver.Steps{Caps: d.Capabilities(), Defaults: d.defaults, Start: d.start})
}

// defaults fills in the image and the runtime class of spec (a root
// directory or mounts, which a Pod cannot have, CheckSpec refuses from the
// driver's capabilities).
func (d *Driver) defaults(_ context.Context, spec *sandbox.Spec) error {
	return contained.Defaults(spec, d.opts.Image, d.opts.RuntimeClass,
		"the kubernetes driver needs an image its nodes can pull: give --image NAME (or image in the template)")
}

// start is Create's own part: a warm Pod claimed, or a Pod made, and the
// agent's handshake over its attach stream.
func (d *Driver) start(ctx context.Context, b *agentdriver.Build) (*agent.Client, []sandbox.Layer, error) {
	spec := b.Spec
	k, err := d.client()
	if err != nil {
		return nil, nil, err
	}
	rc, err := d.runtimeClass(ctx, spec.Runtime)
	if err != nil {
		return nil, nil, err
	}
	sum, err := agentbin.Sum()
	if err != nil {
		return nil, nil, fmt.Errorf("the agent's binary: %w", err)
	}
	var warm *corev1.Pod
	if p := d.poolFor(spec); p != nil {
		warm, err = d.claim(ctx, k, p, spec)
		if errors.Is(err, errNoWarm) {
			d.rc.Logger.Info("warm pool empty: making a Pod", "pool", p.Name, "sandbox_id", spec.ID)
		} else if err != nil {
			return nil, nil, err
		}
	}
	h := newHost(d, k, spec, b.Lock)
	b.Host(h)
	cfg := agentConfig(spec, rc.vm, d.rc.Persistent)
	if err := b.Egress(cfg); err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, d.opts.StartTimeout)
	defer cancel()
	if warm != nil {
		h.name, h.uid, h.created = warm.Name, warm.UID, time.Now()
		h.watch(ctx, warm)
	} else {
		pod := d.podSpec(spec, rc, sum).pod(d.opts.Namespace)
		var secret *corev1.Secret
		if pod.Spec.ImagePullSecrets, secret, err = d.pullSecrets(spec.Image); err != nil {
			return nil, nil, err
		}
		if err := h.createPod(sctx, pod, secret); err != nil {
			return nil, nil, err
		}
		defer d.starts(h)()
	}
	cl, agentLayers, err := h.attach(sctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return cl, append(h.layers(), agentLayers...), nil
}

var _ sandbox.PullReporter = (*Driver)(nil)

// PullOf is the pull of the image of sandbox id that its create waits
// for, if the node pulls one now (sandbox.PullReporter): the image only,
// as the kubelet's events tell no layers or bytes.
func (d *Driver) PullOf(id string) (sandbox.ImagePull, bool) {
	d.mu.Lock()
	h := d.starting[id]
	d.mu.Unlock()
	if h == nil {
		return sandbox.ImagePull{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pulling == "" {
		return sandbox.ImagePull{}, false
	}
	return sandbox.ImagePull{Image: h.pulling}, true
}

// starts follows the node's pulls for h, a sandbox being created, until
// the returned function is called (PullOf).
func (d *Driver) starts(h *host) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	d.mu.Lock()
	if d.starting == nil {
		d.starting = map[string]*host{}
	}
	d.starting[h.spec.ID] = h
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.followPulls(ctx)
	}()
	return func() {
		cancel()
		<-done
		d.mu.Lock()
		delete(d.starting, h.spec.ID)
		d.mu.Unlock()
	}
}

// podSpec is what the Pod of spec (with defaults) is made from.
func (d *Driver) podSpec(spec sandbox.Spec, rc runtimeClass, sum string) podSpec {
	class := spec.Runtime
	if class == RuntimeClassNone || class == "default" {
		class = ""
	}
	agentImage := d.opts.AgentImage
	if agentImage == "" {
		agentImage = AgentImageRef(sum)
	}
	return podSpec{
		Spec: spec, Image: spec.Image, PullPolicy: corev1.PullPolicy(d.opts.ImagePullPolicy), AgentImage: agentImage,
		RuntimeClass: class, VM: rc.vm, Instance: d.opts.Instance, Persistent: d.rc.Persistent,
		CPURequest: d.opts.CPURequest, AgentSum: sum,
	}
}

// unsupported says why airlock cannot use the cluster, and how to make it.
func unsupported(why, fix string) error {
	return &sandbox.UnsupportedError{What: "kubernetes", Why: why, Fix: fix}
}

// layersOf names the isolation layers of a Pod sandbox.
func layersOf(vm bool) []sandbox.Layer {
	l := []sandbox.Layer{sandbox.LayerPidNS, sandbox.LayerMountNS, sandbox.LayerNetNS, sandbox.LayerIPCNS,
		sandbox.LayerUTSNS, sandbox.LayerCgroups}
	if vm {
		l = append(l, sandbox.LayerGVisor)
	}
	return slices.Clip(l)
}
