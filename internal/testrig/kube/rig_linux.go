package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-sandbox/airlock/internal/runsc"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// Readiness timeouts, generous for a loaded two-core machine.
const (
	etcdTimeout       = 60 * time.Second
	apiserverTimeout  = 120 * time.Second
	containerdTimeout = 60 * time.Second
	controlTimeout    = 90 * time.Second
	kubeletTimeout    = 90 * time.Second
	nodeReadyTimeout  = 120 * time.Second
	importTimeout     = 3 * time.Minute
	stopTimeout       = 60 * time.Second
)

// hostPathsRecord names the file in Options.Dir that lists the host
// directories the kubelet made (recordHostPaths).
const hostPathsRecord = "host-paths"

// cniBinDir is where Debian's containernetworking-plugins puts the
// plugins.
const cniBinDir = "/usr/lib/cni"

// rig is the machinery behind a Cluster.
type rig struct {
	dir, run, cache string
	log             io.Writer
	lockTimeout     time.Duration
	startTimeout    time.Duration

	mu      sync.Mutex
	lock    *testrig.Lock
	bins    *kubebin.Set // once started
	socket  string       // containerd's, once started
	comps   []*component
	stopped bool
}

func newRig(opts Options) (*rig, error) {
	r := &rig{
		dir:          filepath.Clean(dirOrDefault(opts.Dir, DefaultDir)),
		cache:        dirOrDefault(opts.CacheDir, testrig.CacheDir()),
		log:          opts.Log,
		lockTimeout:  opts.LockTimeout,
		startTimeout: opts.StartTimeout,
	}
	if !filepath.IsAbs(r.dir) || r.dir == "/" {
		return nil, fmt.Errorf("kube rig: Options.Dir must be an absolute directory other than /, not %q", r.dir)
	}
	r.run = filepath.Join(r.dir, "run")
	if r.lockTimeout == 0 {
		r.lockTimeout = 15 * time.Minute
	}
	if r.startTimeout == 0 {
		r.startTimeout = 4 * time.Minute
	}
	return r, nil
}

// p is a path in the run directory.
func (r *rig) p(elem ...string) string { return filepath.Join(append([]string{r.run}, elem...)...) }

// prerequisites finds what the rig runs, and says what is missing and how
// to get it.
type prerequisites struct {
	bins  *kubebin.Set
	image *rootimage.Image
	runsc string
	runc  string
}

func (r *rig) prerequisites(ctx context.Context) (*prerequisites, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the kube test rig needs root (running as uid %d)", os.Geteuid())
	}
	bins, err := kubebin.Find(r.cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	img, err := rootimage.Find(r.cache, rootimage.Spec{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotBuilt, err)
	}
	rs, err := runsc.Find(ctx)
	if err != nil || !rs.Pinned {
		return nil, fmt.Errorf("%w: gVisor's shim needs the runsc `make runsc` builds (%s), not found", ErrNotBuilt, runsc.PinnedPath())
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, fmt.Errorf("runc is not installed: apt-get install runc")
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			return nil, fmt.Errorf("the CNI plugin %s is not installed: apt-get install containernetworking-plugins", plugin)
		}
	}
	for _, tool := range []string{"ip", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed: apt-get install iproute2 util-linux mount", tool)
		}
	}
	return &prerequisites{bins: bins, image: img, runsc: rs.Path, runc: runc}, nil
}

// ports are the TCP ports of a run, picked free at start.
type ports struct {
	etcd, etcdPeer, apiserver, kubelet, kubeletHealthz, scheduler, controllerManager int
}

// freePorts asks the kernel for n free ports on loopback.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// start brings the cluster up. On failure everything is torn down.
func (r *rig) start(ctx context.Context) (_ *Cluster, err error) {
	began := time.Now()
	pre, err := r.prerequisites(ctx)
	if err != nil {
		return nil, err
	}
	lctx, lcancel := context.WithTimeout(ctx, r.lockTimeout)
	lock, err := testrig.Acquire(lctx, filepath.Join(r.dir, "lock"), "the kube test rig")
	lcancel()
	if err != nil {
		return nil, err
	}
	r.lock = lock
	ctx, cancel := context.WithTimeout(ctx, r.startTimeout)
	defer cancel()
	defer func() {
		if err != nil {
			if serr := r.stop(context.WithoutCancel(ctx)); serr != nil {
				err = errors.Join(err, fmt.Errorf("and cleaning up: %w", serr))
			}
		}
	}()
	if err := r.cleanup(ctx); err != nil {
		return nil, fmt.Errorf("clean up what a previous run left: %w", err)
	}
	logf(r.log, "starting a one-node cluster in %s (%s)", r.run, strings.Join(pre.bins.Versions, ", "))

	dirs := []string{"pki", "etcd", "logs/pods", "logs/runsc", "config", "tunables", "containerd/root",
		"containerd/state", "shim", "opt", "runc", "runsc", "kubelet", "cni/net.d", "cni/ipam", "plugins", "certs"}
	for _, d := range dirs {
		if err := mkdirs(0o755, r.p(d)); err != nil {
			return nil, err
		}
	}
	pp, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	pt := ports{pp[0], pp[1], pp[2], pp[3], pp[4], pp[5], pp[6]}

	// Certificates: one CA; the API server's serving certificate and its
	// client certificate for kubelets; a client certificate per
	// component and for the tests (system:masters); the kubelet's serving
	// certificate.
	ca, err := newPKI(r.p("pki"))
	if err != nil {
		return nil, err
	}
	loopback := net.ParseIP("127.0.0.1")
	apiCert, apiKey, err := ca.issue(certSpec{name: "apiserver", cn: "kube-apiserver", server: true,
		ips: []net.IP{loopback, net.ParseIP(nodeIP), net.ParseIP(serviceIP)},
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}})
	if err != nil {
		return nil, err
	}
	apiKubeletCert, apiKubeletKey, err := ca.issue(certSpec{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client",
		orgs: []string{"system:masters"}, client: true})
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := ca.serviceAccountKey()
	if err != nil {
		return nil, err
	}
	kubeletServe, kubeletServeKey, err := ca.issue(certSpec{name: "kubelet-serving", cn: NodeName, server: true,
		ips: []net.IP{net.ParseIP(nodeIP)}, dns: []string{NodeName}})
	if err != nil {
		return nil, err
	}
	server := "https://127.0.0.1:" + strconv.Itoa(pt.apiserver)
	kubeconfigs := map[string]string{}
	for _, u := range []struct{ name, cn, org string }{
		{"admin", "airlock-admin", "system:masters"},
		{"kubelet", "system:node:" + NodeName, "system:nodes"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
	} {
		var orgs []string
		if u.org != "" {
			orgs = []string{u.org}
		}
		cert, key, err := ca.issue(certSpec{name: u.name, cn: u.cn, orgs: orgs, client: true})
		if err != nil {
			return nil, err
		}
		path := r.p("config", u.name+".kubeconfig")
		if err := writeKubeconfig(path, server, ca.caFile(), cert, key); err != nil {
			return nil, err
		}
		kubeconfigs[u.name] = path
	}

	// Host: the node's address, the rig's cgroup.
	if err := setupNodeLink(ctx); err != nil {
		return nil, err
	}
	if err := setupCgroups(); err != nil {
		return nil, err
	}

	// etcd and containerd first: they need nothing else.
	etcd, err := r.startComponent("etcd", []string{pre.bins.Path(kubebin.Etcd),
		"--name=airlock", "--data-dir=" + r.p("etcd"),
		"--listen-client-urls=" + localURL(pt.etcd), "--advertise-client-urls=" + localURL(pt.etcd),
		"--listen-peer-urls=" + localURL(pt.etcdPeer), "--initial-advertise-peer-urls=" + localURL(pt.etcdPeer),
		"--initial-cluster=airlock=" + localURL(pt.etcdPeer),
		// A test cluster's data need not survive a power cut.
		"--unsafe-no-fsync", "--log-level=warn"})
	if err != nil {
		return nil, err
	}
	socket := r.p("containerd", "containerd.sock")
	r.mu.Lock()
	r.bins, r.socket = pre.bins, socket
	r.mu.Unlock()
	pauseRef := "airlock.invalid/pause:" + pauseTag(pre.bins.Path(kubebin.Pause))
	runscCfg := r.p("config", "runsc.toml")
	platform := "systrap"
	if rs, err := runsc.Inspect(ctx, pre.runsc); err == nil {
		platform = rs.DefaultPlatform()
	}
	if err := os.WriteFile(runscCfg, []byte(runscConfig{runsc: pre.runsc, root: r.p("runsc"),
		logDir: r.p("logs", "runsc"), platform: platform}.toml()), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", runscCfg, err)
	}
	if err := writeJSON(r.p("cni", "net.d", "10-airlock.conflist"), cniConfig(r.p("cni", "ipam"))); err != nil {
		return nil, err
	}
	ctrdCfg := r.p("config", "containerd.toml")
	if err := os.WriteFile(ctrdCfg, []byte(containerdConfig{
		root: r.p("containerd", "root"), state: r.p("containerd", "state"), socket: socket,
		shimSocketDir: r.p("shim"), optDir: r.p("opt"),
		shimRunc: pre.bins.Path(kubebin.ShimRunc), runc: pre.runc, runcRoot: r.p("runc"),
		shimRunsc: pre.bins.Path(kubebin.ShimRunsc), runscConfig: runscCfg,
		cniBin: cniBinDir, cniConf: r.p("cni", "net.d"), pauseImage: pauseRef,
		// Without CAP_SYS_RESOURCE no process may lower an OOM score,
		// and a sandbox container asks for -998: keep containers at
		// containerd's score or above.
		restrictOOMScoreAdj: !hasCapability(unix.CAP_SYS_RESOURCE),
	}.toml()), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", ctrdCfg, err)
	}
	if err := recordHostPaths(filepath.Join(r.dir, hostPathsRecord)); err != nil {
		return nil, err
	}
	containerd, err := r.startComponent("containerd", []string{pre.bins.Path(kubebin.Containerd), "--config=" + ctrdCfg, "--log-level=info"})
	if err != nil {
		return nil, err
	}
	httpc := &http.Client{Transport: &http.Transport{
		// The control plane's health endpoints serve self-signed
		// certificates on loopback; only their status is read.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // health checks on loopback
		Proxy:           nil,
	}}
	defer httpc.CloseIdleConnections()
	if err := etcd.waitReady(ctx, etcdTimeout, httpCheck(httpc, localURL(pt.etcd)+"/health")); err != nil {
		return nil, err
	}

	apiserver, err := r.startComponent("kube-apiserver", []string{pre.bins.Path(kubebin.KubeAPIServer),
		"--etcd-servers=" + localURL(pt.etcd),
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(pt.apiserver), "--advertise-address=" + nodeIP,
		"--cert-dir=" + r.p("certs"),
		"--tls-cert-file=" + apiCert, "--tls-private-key-file=" + apiKey, "--client-ca-file=" + ca.caFile(),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub, "--service-account-signing-key-file=" + saKey,
		"--service-cluster-ip-range=" + serviceRange,
		"--kubelet-client-certificate=" + apiKubeletCert, "--kubelet-client-key=" + apiKubeletKey,
		"--kubelet-certificate-authority=" + ca.caFile(), "--kubelet-preferred-address-types=InternalIP",
		"--enable-priority-and-fairness=false", "--profiling=false", "--v=1"})
	if err != nil {
		return nil, err
	}

	// While the API server starts: containerd, and the images into it.
	if err := containerd.waitReady(ctx, containerdTimeout, r.ctrCheck(pre.bins, socket)); err != nil {
		return nil, err
	}
	importDone := make(chan error, 1)
	imageRef := "airlock.invalid/rootimage:" + pre.image.Manifest.Release[:16]
	go func() {
		importDone <- r.importImages(ctx, pre, socket, pauseRef, imageRef)
	}()

	// The client carries the credentials themselves, not their paths:
	// client-go caches transports by CA path, and the next run's CA has
	// the same path.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigs["admin"])
	if err != nil {
		return nil, fmt.Errorf("load the admin kubeconfig: %w", err)
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, fmt.Errorf("load the admin credentials: %w", err)
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = "", "", ""
	// Tests poll; client-go's default of 5 requests a second would make
	// them wait on the client, not on the cluster.
	cfg.QPS, cfg.Burst = 100, 200
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("make a client: %w", err)
	}
	if err := apiserver.waitReady(ctx, apiserverTimeout, func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, err
	}

	cm, err := r.startComponent("kube-controller-manager", []string{pre.bins.Path(kubebin.KubeControllerManager),
		"--kubeconfig=" + kubeconfigs["controller-manager"],
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(pt.controllerManager), "--cert-dir=" + r.p("certs"),
		// Only what Pods in namespaces need: service accounts and the
		// root CA config map for their tokens, namespace deletion,
		// garbage collection of owned objects, and the node lifecycle
		// (it lifts the not-ready taint the kubelet registers the node
		// with); and what deploying airlock on the rig needs:
		// Deployments (their ReplicaSets) and the binding of a
		// PersistentVolumeClaim to a PersistentVolume the test makes.
		"--controllers=serviceaccount-controller,root-ca-certificate-publisher-controller,namespace-controller," +
			"garbage-collector-controller,node-lifecycle-controller,deployment-controller,replicaset-controller," +
			"persistentvolume-binder-controller",
		"--node-monitor-period=1s",
		"--root-ca-file=" + ca.caFile(), "--service-account-private-key-file=" + saKey,
		"--use-service-account-credentials=true", "--leader-elect=false", "--v=1"})
	if err != nil {
		return nil, err
	}
	scheduler, err := r.startComponent("kube-scheduler", []string{pre.bins.Path(kubebin.KubeScheduler),
		"--kubeconfig=" + kubeconfigs["scheduler"],
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(pt.scheduler), "--cert-dir=" + r.p("certs"),
		"--leader-elect=false", "--v=1"})
	if err != nil {
		return nil, err
	}
	kubelet, err := r.startKubelet(pre, pt, ca.caFile(), kubeletServe, kubeletServeKey, socket, kubeconfigs["kubelet"])
	if err != nil {
		return nil, err
	}
	if _, err := client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: RuntimeClassGvisor},
		Handler:    RuntimeHandlerRunsc,
	}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the RuntimeClass %s: %w", RuntimeClassGvisor, err)
	}
	if err := cm.waitReady(ctx, controlTimeout, httpCheck(httpc, "https://127.0.0.1:"+strconv.Itoa(pt.controllerManager)+"/healthz")); err != nil {
		return nil, err
	}
	if err := scheduler.waitReady(ctx, controlTimeout, httpCheck(httpc, "https://127.0.0.1:"+strconv.Itoa(pt.scheduler)+"/healthz")); err != nil {
		return nil, err
	}
	if err := kubelet.waitReady(ctx, kubeletTimeout, httpCheck(httpc, "http://127.0.0.1:"+strconv.Itoa(pt.kubeletHealthz)+"/healthz")); err != nil {
		return nil, err
	}
	if err := kubelet.waitReady(ctx, nodeReadyTimeout, func(ctx context.Context) error {
		return nodeReady(ctx, client)
	}); err != nil {
		return nil, err
	}
	if err := cm.waitReady(ctx, controlTimeout, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	select {
	case err := <-importDone:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("import the images: %w", ctx.Err())
	}
	c := &Cluster{
		Config: cfg, Client: client, Kubeconfig: kubeconfigs["admin"], Image: imageRef,
		Versions: pre.bins.Versions, Started: time.Since(began), rig: r,
	}
	logf(r.log, "cluster ready in %.1fs; kubeconfig %s", c.Started.Seconds(), c.Kubeconfig)
	return c, nil
}

// startComponent starts a component and remembers it for stop.
func (r *rig) startComponent(name string, argv []string) (*component, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return nil, errStopped
	}
	c, err := startComponent(name, r.p("logs"), argv)
	if err != nil {
		return nil, err
	}
	r.comps = append(r.comps, c)
	return c, nil
}

// startKubelet starts the kubelet in a mount namespace of its own where the
// kernel tunables it insists on read as it wants them (tunableOverlay),
// whose root directory is shared with this namespace, so that the volumes
// it mounts there are seen by containerd, and without the other programs'
// mounts (foreignMounts).
func (r *rig) startKubelet(pre *prerequisites, pt ports, caFile, certFile, keyFile, socket, kubeconfig string) (*component, error) {
	cfgPath := r.p("config", "kubelet.yaml")
	if err := writeJSON(cfgPath, kubeletConfig{
		port: pt.kubelet, healthzPort: pt.kubeletHealthz,
		caFile: caFile, tlsCertFile: certFile, tlsKeyFile: keyFile,
		runtimeSocket: socket, podLogs: r.p("logs", "pods"), pluginDir: r.p("plugins"),
	}.object()); err != nil {
		return nil, err
	}
	root := r.p("kubelet")
	if err := sharedBind(root); err != nil {
		return nil, err
	}
	binds, err := tunableOverlay(r.p("tunables"))
	if err != nil {
		return nil, err
	}
	kubelet := []string{pre.bins.Path(kubebin.Kubelet),
		"--config=" + cfgPath, "--kubeconfig=" + kubeconfig,
		"--hostname-override=" + NodeName, "--node-ip=" + nodeIP,
		"--root-dir=" + root, "--cert-dir=" + r.p("certs"), "--v=2"}
	// What the kubelet uses: its run directory, its program, the host's
	// /etc (and where resolv.conf really is), the tools it runs (mount,
	// umount), and the fixed paths it writes.
	need := []string{r.run, filepath.Dir(pre.bins.Path(kubebin.Kubelet)), "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64"}
	for _, p := range fixedHostPaths {
		need = append(need, p.dir)
	}
	if resolv, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil {
		need = append(need, resolv)
	}
	foreign, err := foreignMounts(need)
	if err != nil {
		return nil, err
	}
	script := "set -e; mount --make-rprivate /proc"
	for _, b := range binds {
		script += "; " + b
	}
	for _, m := range foreign {
		script += "; umount -l " + shellQuote(m) + " 2>/dev/null || true"
	}
	script += `; exec "$@"`
	argv := append([]string{"unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", script, "kubelet"}, kubelet...)
	return r.startComponent("kubelet", argv)
}

// importImages imports the pause image and the rig's image into the k8s.io
// namespace of containerd.
func (r *rig) importImages(ctx context.Context, pre *prerequisites, socket, pauseRef, imageRef string) error {
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	pause, err := pauseImage(pauseRef, pre.bins.Path(kubebin.Pause))
	if err != nil {
		return err
	}
	m := pre.image.Manifest
	for _, img := range []ociImage{pause, fileImage(imageRef, pre.image.Path, m.SHA256, m.Size)} {
		if err := r.importImage(ctx, pre.bins, socket, img); err != nil {
			return err
		}
	}
	return nil
}

// importLayer imports a one-layer image whose layer (an uncompressed
// tar) is in memory.
func (r *rig) importLayer(ctx context.Context, ref string, layer []byte, entrypoint []string) error {
	r.mu.Lock()
	bins, socket := r.bins, r.socket
	r.mu.Unlock()
	if bins == nil {
		return errors.New("import an image: the rig has not started")
	}
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	return r.importImage(ctx, bins, socket, ociImage{
		ref:         ref,
		layer:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil },
		layerDigest: digestOf(layer),
		layerSize:   int64(len(layer)),
		entrypoint:  entrypoint,
	})
}

// importImage streams one image into `ctr images import -`.
func (r *rig) importImage(ctx context.Context, bins *kubebin.Set, socket string, img ociImage) error {
	cmd := exec.CommandContext(ctx, bins.Path(kubebin.Ctr), "--address", socket, "--namespace", "k8s.io",
		"images", "import", "-")
	cmd.Env = componentEnv()
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("import %s: %w", img.ref, err)
	}
	werr := make(chan error, 1)
	go func() {
		err := img.writeArchive(pw)
		pw.CloseWithError(err)
		werr <- err
	}()
	err := cmd.Wait()
	pr.CloseWithError(io.ErrClosedPipe)
	if wErr := <-werr; wErr != nil && err == nil {
		err = wErr
	}
	if err != nil {
		return fmt.Errorf("import %s into containerd: %w: %s", img.ref, err, testrig.TailLines([]byte(out.String()), 5))
	}
	return nil
}

// ctrCheck asks containerd for its version.
func (r *rig) ctrCheck(bins *kubebin.Set, socket string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if _, err := os.Stat(socket); err != nil {
			return fmt.Errorf("no socket yet: %w", err)
		}
		out, err := exec.CommandContext(ctx, bins.Path(kubebin.Ctr), "--address", socket, "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, testrig.TailLines(out, 2))
		}
		return nil
	}
}

// nodeReady says whether the node is registered, Ready, and takes Pods
// (no NoSchedule or NoExecute taint).
func nodeReady(ctx context.Context, client kubernetes.Interface) error {
	n, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s is not registered yet", NodeName)
	}
	if err != nil {
		return err
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s is not Ready: %s: %s", NodeName, c.Reason, c.Message)
			}
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s reports no Ready condition yet", NodeName)
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("node %s is Ready but tainted %s:%s (kube-controller-manager lifts it)", NodeName, t.Key, t.Effect)
		}
	}
	return nil
}

// httpCheck GETs url and wants 200.
func httpCheck(c *http.Client, url string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

func localURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// pauseTag names the pause image by its program's size and time, enough
// to tell builds apart.
func pauseTag(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "0"
	}
	return strconv.FormatInt(st.Size(), 36) + "-" + strconv.FormatInt(st.ModTime().Unix(), 36)
}

// stop stops the components, newest first, then cleans up. It holds the
// rig's lock until done.
func (r *rig) stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	comps := r.comps
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	for i := len(comps) - 1; i >= 0; i-- {
		comps[i].stop(5 * time.Second)
	}
	err := r.cleanup(ctx)
	r.lock.Unlock()
	return err
}

// cleanup removes everything a run leaves: its processes (and the Pods'),
// mounts, cgroups, links and files; the run's logs move to last-logs. It
// works from names and paths alone, so it also cleans up after a run that
// crashed. The caller holds the lock.
func (r *rig) cleanup(ctx context.Context) error {
	var errs []error
	if err := killRigProcesses(ctx, r.run, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := testrig.UnmountUnder(r.run); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(ctx, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLinks(ctx); err != nil {
		errs = append(errs, err)
	}
	removeContainerLogLinks(r.p("logs", "pods"))
	removeShimSockets(r.p("containerd", "state"), r.p("containerd", "containerd.sock"))
	// After the links and sockets in them are gone.
	removeHostPaths(filepath.Join(r.dir, hostPathsRecord))
	if _, err := os.Stat(r.p("logs")); err == nil {
		last := filepath.Join(r.dir, "last-logs")
		_ = os.RemoveAll(last)
		if err := os.Rename(r.p("logs"), last); err != nil {
			errs = append(errs, fmt.Errorf("keep the logs: %w", err))
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(r.run); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", r.run, err))
		}
	}
	return errors.Join(errs...)
}

// logs maps each component to its log file.
func (r *rig) logs() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]string{}
	for _, c := range r.comps {
		m[c.name] = c.logPath
	}
	return m
}

// rss lists the resident memory of the components that run.
func (r *rig) rss() []Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var u []Usage
	for _, c := range r.comps {
		if n := c.rss(); n > 0 {
			u = append(u, Usage{Component: c.name, PID: c.cmd.Process.Pid, RSS: n})
		}
	}
	return u
}

// tail returns the last n lines of a component's log, wherever it is now.
func (r *rig) tail(component string, n int) string {
	path := r.p("logs", component+".log")
	if _, err := os.Stat(path); err != nil {
		path = filepath.Join(r.dir, "last-logs", component+".log")
	}
	return logTail(path, n)
}
