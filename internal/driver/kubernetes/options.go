// Package kubernetes runs sandboxes as Pods of a Kubernetes cluster, one
// Pod per sandbox, through the API server alone: airlock needs no route to
// the Pods' addresses and may run outside the cluster.
//
// Each Pod's only container runs airlock's agent as its first process, as
// in the Docker driver: the runtime (runc, or gVisor and Kata through a
// RuntimeClass) builds the root from the sandbox's image, the namespaces
// and the cgroup with the limits; the agent, root of the container with a
// short list of capabilities, moves into a network namespace of its own
// (only loopback: the Pod's network is never the workload's) and runs every
// command as uid 1000 with no capabilities, no_new_privs and its own
// seccomp filter, inside the runtime's default seccomp profile. The host
// speaks the agent's protocol over the Pod's attach stream (its standard
// input and output, through the API server and the kubelet), never over a
// network port. The agent's binary reaches the Pod as an image volume
// (Kubernetes 1.35 and later) of airlock's own one-file image, so the
// sandbox's image is never changed.
//
// A daemon's Pods outlive it (Options.Persistent): Close deletes a
// sandbox's Pod; a daemon that restarts reattaches to its live ones
// (Recover, through a relay run with the Pod's exec stream) and Sweep
// deletes the rest (labels airlock.sandbox and airlock.daemon). A Pod the
// kubelet evicts or kills for its memory ends its sandbox with that
// reason. See docs/decisions.md.
package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"k8s.io/client-go/rest"

	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Options configure the driver. The zero value reaches the cluster the
// in-cluster config names (a Pod's service account), in namespace
// "airlock", with runtime class gvisor.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file naming the cluster and
	// credentials. Empty: $KUBECONFIG, else the in-cluster config (the
	// service account of the Pod airlock runs in), else ~/.kube/config.
	Kubeconfig string
	// Config, when set, is used instead of Kubeconfig (tests, embedders).
	Config *rest.Config
	// Namespace holds the sandboxes' Pods. Empty means the kubeconfig
	// context's namespace, or the service account's in a Pod, else
	// "airlock".
	Namespace string
	// Image is the image of a sandbox whose Spec names none. Empty: every
	// Spec must name one. It must have a Linux userland; the agent comes
	// from AgentImage.
	Image string
	// ImagePullPolicy is the Pods' pull policy for Image ("Always",
	// "IfNotPresent", "Never"). Empty means IfNotPresent.
	ImagePullPolicy string
	// PullSecrets name Secrets of the namespace (type
	// kubernetes.io/dockerconfigjson) that every Pod gets as
	// imagePullSecrets: the nodes' credentials for private registries.
	// Empty: none.
	PullSecrets []string
	// PullCredentials, when set, finds credentials for the registry of a
	// sandbox's image (authn.DefaultKeychain: the Docker config file and
	// its credential helpers, as `docker` finds them); the driver keeps
	// those it finds in a Secret of the namespace (airlock-pull-<hash>,
	// labelled airlock.pull-secret) and names it in the Pod's
	// imagePullSecrets, which needs the right to create Secrets there.
	// Nil: none.
	PullCredentials authn.Keychain
	// AgentImage is the image that holds the agent's binary (one file,
	// made by `airlock kubernetes agent-image`), mounted into every Pod as
	// an image volume. Empty means AgentImageRef(): the node must have it
	// (pushed to a registry the nodes pull from, under that name, or
	// imported into their runtime).
	AgentImage string
	// RuntimeClass is the RuntimeClass of a sandbox whose Spec names no
	// runtime. Empty means "gvisor". "runc" (or the cluster's default,
	// "default") runs the Pod with the node's default runtime, which
	// shares the node's kernel: only when the template says so.
	RuntimeClass string
	// CPURequest is the share of each sandbox's CPU limit its Pod requests
	// from the scheduler (0 < r ≤ 1). Zero means 0.1: sandboxes are mostly
	// idle, and a request of the whole limit would let a node hold very
	// few. Memory is always requested whole (a Pod over its request is
	// what the kubelet evicts first).
	CPURequest float64
	// Instance names the airlock process that makes the Pods: its hash is
	// their label airlock.daemon (the name itself is an annotation), and
	// Sweep deletes only Pods of its own instance. Empty means
	// "run@<host name>", the one-shot CLI's.
	Instance string
	// Persistent makes sandboxes outlive the process that made them, as a
	// daemon's must (it reattaches after a restart: Recover). False: a
	// sandbox dies with its process: the agent's input closes when the
	// attach stream ends, the agent ends, and so does the Pod.
	Persistent bool
	// StateDir holds the sandbox-id locks shared with the other drivers.
	// Empty means /run/airlock.
	StateDir string
	// Pools are warm pools: Pods made ahead for sandboxes of a shape
	// (FillPools), which a create of that shape claims. None by default.
	Pools []Pool
	// StartTimeout bounds a create from the Pod's creation to its agent's
	// answer (scheduling, pulling the image, starting the runtime). Zero
	// means two minutes.
	StartTimeout time.Duration
	// Logger receives the driver's logs. Nil discards them.
	Logger *slog.Logger
	// Egress is the proxy that sandboxes in network mode egress reach
	// through the agent's tunnel. Nil means one of the driver's own, with
	// the default limits and no secrets.
	Egress *egress.Proxy
}

// Labels and annotations on every Pod the driver makes.
const (
	// LabelSandbox holds the sandbox's id.
	LabelSandbox = "airlock.sandbox"
	// LabelDaemon holds a hash of the Instance of the airlock that made
	// it (DaemonLabel); AnnotationDaemon holds the Instance itself.
	LabelDaemon      = "airlock.daemon"
	AnnotationDaemon = "airlock.daemon"
	// LabelAgent holds the agent's checksum (16 hex digits).
	LabelAgent = "airlock.agent"
)

// Defaults.
const (
	DefaultNamespace    = "airlock"
	DefaultRuntimeClass = "gvisor"
	// RuntimeClassNone names no RuntimeClass: the node's default runtime.
	RuntimeClassNone = "runc"
)

// RunInstance is the Instance of one-shot runs on the host called
// hostname.
func RunInstance(hostname string) string { return "run@" + hostname }

// DaemonLabel is the value of label airlock.daemon for instance: label
// values allow neither "@" nor "/", which instances have.
func DaemonLabel(instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return hex.EncodeToString(sum[:])[:20]
}

// shared are the options every agent driver takes (agentdriver.Recipe).
func (o Options) shared() agentdriver.Shared {
	return agentdriver.Shared{Logger: o.Logger, StateDir: o.StateDir, Egress: o.Egress, Persistent: o.Persistent}
}
