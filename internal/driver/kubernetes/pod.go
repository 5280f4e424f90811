package kubernetes

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver/contained"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// containerName is the name of the Pod's one container.
const containerName = "sandbox"

// agentCaps are the container's capabilities (agent.ContainedCaps) as
// Kubernetes spells them, and NET_ADMIN to bring up loopback in the
// agent's own network namespace; the agent drops that once the sandbox is
// built, and commands get none.
var agentCaps = func() []corev1.Capability {
	var caps []corev1.Capability
	for _, c := range agent.ContainedCaps {
		caps = append(caps, corev1.Capability(strings.TrimPrefix(c, "CAP_")))
	}
	return append(caps, "NET_ADMIN")
}()

// podSpec is what one sandbox's Pod is made from.
type podSpec struct {
	Spec         sandbox.Spec // with defaults and ID
	Image        string
	PullPolicy   corev1.PullPolicy
	AgentImage   string
	RuntimeClass string // "" for the node's default runtime
	VM           bool   // the runtime has a kernel of its own (gVisor, Kata)
	Instance     string
	Persistent   bool
	CPURequest   float64
	AgentSum     string
}

// podName is the name of sandbox id's Pod.
func podName(id string) string { return "airlock-" + strings.ReplaceAll(id, "_", "-") }

// pod returns the sandbox's Pod: the agent as its only process, root of
// the container with agentCaps, no privilege escalation (no_new_privs) and
// the runtime's default seccomp profile; a read-only root from the image
// (with a kernel of the runtime's own the agent makes it read-only in that
// kernel, as in the Docker driver); /workspace and /tmp in memory, sized;
// memory and CPU limits; no service account token, no service links, no
// host namespaces or paths; standard input open for the agent's stream.
func (p podSpec) pod(namespace string) *corev1.Pod {
	l := p.Spec.Limits
	memory := contained.Memory(l, p.VM)
	cpuMilli := int64(l.CPUs * 1000)
	reqMilli := max(int64(float64(cpuMilli)*p.CPURequest), 1)
	f := false
	zero := int64(0)
	grace := int64(1)
	sc := &corev1.SecurityContext{
		RunAsUser: &zero, RunAsGroup: &zero, RunAsNonRoot: &f,
		Privileged: &f, AllowPrivilegeEscalation: &f,
		ReadOnlyRootFilesystem: ptr(!p.VM),
		Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: agentCaps},
		SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(p.Spec.ID), Namespace: namespace,
			Labels: map[string]string{
				LabelSandbox: p.Spec.ID, LabelDaemon: DaemonLabel(p.Instance), LabelAgent: p.AgentSum,
			},
			Annotations: map[string]string{AnnotationDaemon: p.Instance},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &f,
			EnableServiceLinks:            &f,
			Hostname:                      contained.Hostname,
			TerminationGracePeriodSeconds: &grace,
			// The workload's network is the agent's namespace with only
			// loopback; nothing inside resolves names but through egress.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           p.Image,
				ImagePullPolicy: p.PullPolicy,
				// No environment or working directory of its own: the
				// agent starts with the image's, which it gives commands
				// (ContainedConfig.ImageEnv), and by its full name.
				Command: []string{contained.AgentBinDir + "/" + contained.AgentName, agent.OwnNamespacesArg, agent.StdioArg},
				Args:    []string{},
				Stdin:   true,
				// A persistent Pod's standard input stays open when its
				// host goes, so that the agent outlives its sessions;
				// otherwise it closes, and the agent ends.
				StdinOnce:                !p.Persistent,
				TTY:                      false,
				SecurityContext:          sc,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
						corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
					},
					Requests: corev1.ResourceList{
						corev1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
						corev1.ResourceCPU:    *resource.NewMilliQuantity(reqMilli, resource.DecimalSI),
					},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "agent", MountPath: contained.AgentDir, ReadOnly: true},
					{Name: "workspace", MountPath: sandbox.Workspace},
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "agent", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
					Reference: p.AgentImage, PullPolicy: corev1.PullIfNotPresent,
				}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(l.DiskBytes, resource.BinarySI),
				}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(l.TmpBytes, resource.BinarySI),
				}}},
			},
		},
	}
	if p.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &p.RuntimeClass
	}
	return pod
}

func ptr[T any](v T) *T { return &v }

// agentConfig is the agent's Config for a sandbox made from spec (with
// defaults): the runtime built the root and mounted everything; the agent
// gets the limits it enforces inside and how to treat commands.
func agentConfig(spec sandbox.Spec, vm, persistent bool) *agent.Config {
	l := spec.Limits
	listen := ""
	if persistent {
		listen = contained.SessionSocket
	}
	return &agent.Config{
		Hostname: contained.Hostname, DiskBytes: l.DiskBytes, TmpBytes: l.TmpBytes,
		UID: contained.WorkloadUID, GID: contained.WorkloadGID, Env: spec.Env,
		OpenFiles: l.OpenFiles, FileSize: l.DiskBytes, Home: spec.Home,
		Contained: &agent.ContainedConfig{
			Pids: l.Pids, ChrootDir: contained.ChrootDir, Listen: listen,
			AgentVolume: contained.AgentDir, Home: contained.AgentHome, MaskProc: !vm,
			Unmount: []string{corev1.TerminationMessagePathDefault}, OwnWorkspace: true,
			CgroupV1: true, SharedUIDs: !vm, ReadOnlyRoot: vm, ImageEnv: true,
		},
	}
}

// AgentImageRef is the default name of the agent's image for the agent
// whose checksum is sum (16 hex digits): Options.AgentImage names another.
func AgentImageRef(sum string) string { return "airlock.invalid/airlock-agent:" + sum }

// AgentImageLayer returns the agent image's one layer, an uncompressed
// tar: the directory agent/ (mode 0700, root's) holding the binary read
// from bin.
func AgentImageLayer(bin io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "agent/", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: epoch}); err != nil {
		return nil, fmt.Errorf("make the agent's image: %w", err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: "agent/" + contained.AgentName, Typeflag: tar.TypeReg, Mode: 0o755, Size: size, ModTime: epoch}); err != nil {
		return nil, fmt.Errorf("make the agent's image: %w", err)
	}
	if n, err := io.Copy(tw, bin); err != nil || n != size {
		return nil, fmt.Errorf("make the agent's image: copied %d of %d bytes: %w", n, size, err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("make the agent's image: %w", err)
	}
	return buf.Bytes(), nil
}
