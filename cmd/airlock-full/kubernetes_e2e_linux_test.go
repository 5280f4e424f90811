package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/kubernetes"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube"
)

// TestE2EKubernetesDeploy deploys airlock on the one-node rig from
// deploy/kubernetes/airlock.yaml and creates a sandbox through it with the
// Go SDK. What the rig lacks is made up for, and nothing else changed:
//   - no registry: the airlock binary reaches the daemon's Pod as an image
//     volume of a one-layer image imported into the node (the container's
//     image is the rig's Debian image), and so does the agent's image;
//   - the API server listens on loopback and there is no kube-proxy: the
//     daemon's Pod uses the node's network and a kubeconfig naming the API
//     server, with a token of the manifests' service account (so the
//     manifests' Role is what it may do);
//   - no storage provisioner: the test makes the PersistentVolume that the
//     manifests' claim binds to (a directory of the test's);
//   - the daemon listens on a free loopback port, and its template runs the
//     rig's image.
func TestE2EKubernetesDeploy(t *testing.T) {
	testcap.Require(t, "root", "kubernetes")
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	c := kube.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The images: airlock's binaries, and the agent's.
	bin, err := binLayer(filepath.Join(binDir, "airlock"), filepath.Join(binDir, "airlock-agent"))
	if err != nil {
		t.Fatal(err)
	}
	const binImage, agentImage = "airlock.invalid/airlock-bin:e2e", "airlock.invalid/airlock-agent:e2e"
	if err := c.ImportImage(ctx, binImage, bin, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(binDir, "airlock-agent"))
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	agentLayer, err := kubernetes.AgentImageLayer(f, fi.Size())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(ctx, agentImage, agentLayer, nil); err != nil {
		t.Fatal(err)
	}

	// The operator's key, made in the state directory before the daemon
	// starts, as `kubectl exec … airlock keys create` would.
	pvDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(pvDir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	opKey := newKey(t, filepath.Join(pvDir, "state"), "operator")
	port := freePort(t)

	manifest, err := os.ReadFile("../../deploy/kubernetes/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs := c.Client
	const ns = "airlock"
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode a manifest: %v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		case *networkingv1.NetworkPolicy:
			_, err = cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.PersistentVolumeClaim:
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "airlock-e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
				},
			}
			if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err = cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			cfg := o.Data["config.toml"]
			cfg = strings.Replace(cfg, `listen = "0.0.0.0:7070"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, port), 1)
			cfg = strings.Replace(cfg, `image = "python:3.12-slim"`, fmt.Sprintf("image = %q", c.Image), 1)
			o.Data["config.toml"] = cfg
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			kc := saKubeconfig(ctx, t, c)
			if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "airlock-kubeconfig"}, Data: map[string][]byte{"config": kc},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			spec := &o.Spec.Template.Spec
			spec.HostNetwork = true
			spec.DNSPolicy = corev1.DNSDefault
			spec.Volumes = append(spec.Volumes,
				corev1.Volume{Name: "bin", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: binImage, PullPolicy: corev1.PullNever}}},
				corev1.Volume{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "airlock-kubeconfig"}}})
			ct := &spec.Containers[0]
			ct.Image, ct.ImagePullPolicy = c.Image, corev1.PullNever
			ct.Command[0] = "/opt/airlock/airlock"
			for i := range ct.Env {
				if ct.Env[i].Name == "AIRLOCK_KUBE_AGENT_IMAGE" {
					ct.Env[i].Value = agentImage
				}
			}
			ct.Env = append(ct.Env,
				corev1.EnvVar{Name: "AIRLOCK_AGENT", Value: "/opt/airlock/airlock-agent"},
				corev1.EnvVar{Name: "KUBECONFIG", Value: "/etc/airlock-kube/config"})
			ct.VolumeMounts = append(ct.VolumeMounts,
				corev1.VolumeMount{Name: "bin", MountPath: "/opt/airlock", ReadOnly: true},
				corev1.VolumeMount{Name: "kubeconfig", MountPath: "/etc/airlock-kube", ReadOnly: true})
			ct.Ports = nil
			ct.ReadinessProbe.HTTPGet.Port.IntVal = int32(port)
			ct.ReadinessProbe.HTTPGet.Host = "127.0.0.1"
			_, err = cs.AppsV1().Deployments(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			o.Spec.Ports[0].TargetPort.IntVal = int32(port)
			_, err = cs.CoreV1().Services(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("the manifests have a %T the test does not know", obj)
		}
		if err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}

	// The daemon answers once its Pod is ready.
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	cl, err := client.New(url, opKey)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := cl.Health(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=airlock"})
			var states []string
			for _, p := range pods.Items {
				states = append(states, fmt.Sprintf("%s %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses))
				logs, _ := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
				states = append(states, string(logs))
			}
			t.Fatalf("the daemon did not answer at %s: %v", url, states)
		}
		time.Sleep(250 * time.Millisecond)
	}
	start := time.Now()
	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatalf("create a sandbox through the deployed daemon: %v", err)
	}
	t.Logf("sandbox %s (driver %s) made in %v", sb.ID, sb.Driver, time.Since(start))
	res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo hello from $(hostname); cat /proc/net/dev | wc -l"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(res.Stdout), "hello from sandbox\n") {
		t.Errorf("exec: %q %q", res.Stdout, res.Stderr)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelSandbox + "=" + sb.ID})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.RuntimeClassName == nil || *pods.Items[0].Spec.RuntimeClassName != kube.RuntimeClassGvisor {
		t.Errorf("the sandbox's Pod in namespace %s: %v %+v", ns, err, pods)
	}
	if err := cl.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelSandbox + "=" + sb.ID})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the sandbox's Pod is still there after its delete: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// binLayer is a one-layer image's tar holding the files as opt-relative
// names (airlock, airlock-agent), for an image volume.
func binLayer(paths ...string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(p), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// saKubeconfig is a kubeconfig of the manifests' service account (a token
// from the TokenRequest API) for the rig's API server, namespace airlock.
func saKubeconfig(ctx context.Context, t *testing.T, c *kube.Cluster) []byte {
	t.Helper()
	exp := int64(3600)
	tok, err := c.Client.CoreV1().ServiceAccounts("airlock").CreateToken(ctx, "airlock",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the service account: %v", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rig"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["airlock"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["airlock"] = &clientcmdapi.Context{Cluster: "rig", AuthInfo: "airlock", Namespace: "airlock"}
	cfg.CurrentContext = "airlock"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripComments drops YAML comment lines.
func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// freePort is a free loopback TCP port.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
