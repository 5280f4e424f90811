// Package kube starts a real one-node Kubernetes cluster on this machine
// for tests: etcd, kube-apiserver (RBAC, client certificates),
// kube-controller-manager (service accounts, namespaces, garbage
// collection, the root CA config map), kube-scheduler, and a kubelet with
// containerd, runc and gVisor's containerd shim behind the RuntimeClass
// "gvisor". Pods run the rig's own image (Debian minbase plus python3,
// package rootimage) with imagePullPolicy Never: no registry is involved.
//
// Tests use it with
//
//	func TestMain(m *testing.M) { os.Exit(kube.Main(m)) }
//
//	func TestPods(t *testing.T) {
//		c := kube.Shared(t) // one cluster per test binary, started on first use
//		pods := c.Client.CoreV1().Pods(c.Namespace(t))
//		…
//	}
//
// or kube.Start(t) for a cluster of the test's own. The programs are built
// once into the cache by `make kube-rig` (package kubebin); starting a
// cluster then takes seconds. Only one cluster runs on a machine at a time
// (a lock under Options.Dir); a second waits for the first.
//
// What the rig changes on the host, all undone at Stop and, after a crash,
// at the next start: processes, mounts and files under Options.Dir; the
// cgroup /airlock-kube in each hierarchy; two bridges, airlock-node (the
// node's address, 198.18.0.1, in the benchmarking range RFC 2544 reserves)
// and airlock-pods (the Pods' network, 198.18.1.0/24, with no route out:
// Pods reach each other only); and the few paths the components use
// whatever their configuration (/var/lib/kubelet/device-plugins,
// /var/log/containers, gVisor's shim sockets in /run/containerd/s), when
// the rig made them. The kubelet sets six kernel tunables
// (vm.overcommit_memory, kernel.panic, …) when they differ from what it
// wants; the rig runs it in a mount namespace where those files read as
// wanted, so the host's values are never changed, and without the other
// programs' mounts, so that it pins none of them.
//
// On a host whose root lacks CAP_SYS_RESOURCE (this project's VM), no
// process may lower an OOM score: containerd then keeps containers at its
// own score, and gVisor's shim is built with its refusal tolerated
// (package kubebin).
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// Names the rig gives things in the cluster and on the host.
const (
	// NodeName is the node's name.
	NodeName = "airlock-node"
	// RuntimeClassGvisor is the RuntimeClass whose Pods run in gVisor.
	RuntimeClassGvisor = "gvisor"
	// RuntimeHandlerRunsc is the containerd runtime behind it.
	RuntimeHandlerRunsc = "runsc"
	// DefaultDir holds a running cluster's state.
	DefaultDir = testrig.KubeDir

	nodeIP       = "198.18.0.1"
	nodeLink     = "airlock-node"
	podLink      = "airlock-pods"
	podSubnet    = "198.18.1.0/24"
	serviceRange = "198.18.128.0/24"
	serviceIP    = "198.18.128.1"
	cgroupName   = "airlock-kube"
)

// Options configure a cluster. The zero value is the usual one.
type Options struct {
	// Dir holds the cluster's state while it runs; "" means DefaultDir.
	// Everything in it but its lock file is removed at Stop, except that
	// the logs of the last run are kept in Dir/last-logs.
	Dir string
	// CacheDir is where `make kube-rig` put the programs and the image;
	// "" means testrig.CacheDir().
	CacheDir string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// LockTimeout bounds the wait for another cluster on this machine to
	// stop; zero means 15 minutes.
	LockTimeout time.Duration
	// StartTimeout bounds the start once the lock is held; zero means 4
	// minutes.
	StartTimeout time.Duration
}

// Cluster is a running one-node cluster.
type Cluster struct {
	// Config is an administrator's (system:masters) client config.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	// Kubeconfig is the path of an administrator's kubeconfig file, for
	// kubectl --kubeconfig.
	Kubeconfig string
	// Image is the reference of the rig's image (Debian minbase plus
	// python3) in the node's containerd; use it with imagePullPolicy Never.
	Image string
	// Versions lists the components' versions, for messages.
	Versions []string
	// Started is how long the start took.
	Started time.Duration

	rig *rig
}

// ErrNotBuilt says the rig's programs or image are missing from the cache.
var ErrNotBuilt = errors.New("the kube test rig is not built")

// New starts a cluster and returns once the node is Ready, the RuntimeClass
// gvisor exists and the image is imported. It waits while another cluster
// runs on this machine. A failure names the component and its log's last
// lines, and leaves nothing behind.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	r, err := newRig(opts)
	if err != nil {
		return nil, err
	}
	return r.start(ctx)
}

// Stop stops every component, kills what the Pods left, and removes the
// rig's mounts, cgroups, links and state. It runs even when ctx is done
// (under its own timeout) and may be called more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	if c == nil || c.rig == nil {
		return nil
	}
	return c.rig.stop(context.WithoutCancel(ctx))
}

// Logs maps each component to its log file, for messages; the files move
// to Dir/last-logs at Stop.
func (c *Cluster) Logs() map[string]string { return c.rig.logs() }

// LogDir is where the logs are kept once the cluster has stopped.
func (c *Cluster) LogDir() string { return filepath.Join(c.rig.dir, "last-logs") }

// ImportImage imports a one-layer image into the node's containerd (the
// k8s.io namespace, which the kubelet uses) under ref: layer is the
// layer's uncompressed tar, entrypoint the image's. Pods use it with
// imagePullPolicy Never (or as an image volume with pullPolicy Never).
func (c *Cluster) ImportImage(ctx context.Context, ref string, layer []byte, entrypoint []string) error {
	return c.rig.importLayer(ctx, ref, layer, entrypoint)
}

// Usage is one component's resident memory.
type Usage struct {
	Component string
	PID       int
	RSS       int64 // bytes
}

// RSS returns the resident memory of every component process that runs.
func (c *Cluster) RSS() []Usage { return c.rig.rss() }

// Tail returns the last n lines of a component's log ("kubelet",
// "containerd", …), for a test's failure message.
func (c *Cluster) Tail(component string, n int) string { return c.rig.tail(component, n) }

// dirOrDefault returns d, or def when d is "".
func dirOrDefault(d, def string) string {
	if d == "" {
		return def
	}
	return d
}

// logf writes a progress line.
func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "kube: "+format+"\n", args...)
	}
}

// mkdirs creates directories.
func mkdirs(mode os.FileMode, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, mode); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}
