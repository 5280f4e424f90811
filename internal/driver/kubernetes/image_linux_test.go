package kubernetes

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// TestImageFromRegistry: the node pulls a sandbox's image from a private
// registry on loopback (the reference registry behind htpasswd, plain
// HTTP, which containerd uses for a loopback registry), with the Pod's
// imagePullSecrets: made by the driver from the Docker config file's
// credentials (runc), or a Secret the configuration names (gVisor). The
// image (the rigs' debootstrap root as one layer) runs python3 with its
// environment and working directory; without credentials the create fails
// saying the pull did.
func TestImageFromRegistry(t *testing.T) {
	r := testRig(t)
	testcap.Require(t, "registry")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root, err := rootimage.Ensure(ctx, testrig.CacheDir(), rootimage.Spec{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.RunAuth(ctx, t.TempDir(), "team", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	img, err := registry.RootImage(root.Path)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reg.Push("team/python:3", img)
	if err != nil {
		t.Fatal(err)
	}
	// The same image with a layer of its own on top (16 MiB of random
	// bytes, which the node cannot have), fetched through a proxy slowed
	// to 8 MiB/s, so that the node's pull lasts while the test watches.
	own, err := random.Layer(16<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	slowImg, err := mutate.AppendLayers(img, own)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Push("team/python:slow", slowImg); err != nil {
		t.Fatal(err)
	}
	slow, stopSlow, err := testrig.SlowProxy(reg.Host, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSlow()
	slowRef := slow + "/team/python:slow"
	auth := base64.StdEncoding.EncodeToString([]byte(reg.User + ":" + reg.Password))
	dockerConfig := fmt.Sprintf(`{"auths": {%q: {"auth": %q}, %q: {"auth": %q}}}`, reg.Host, auth, slow, auth)
	newDriver := func(t *testing.T, o Options) *Driver {
		o.Config, o.Namespace, o.Instance, o.Persistent = r.c.Config, r.ns, testInstance(), true
		o.ImagePullPolicy = "Always" // every Pod's pull asks the registry, with its own credentials
		d, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	script := `import os, sys; print(sys.version.split()[0].split(".")[0], os.environ["GREETING"], os.getcwd())`
	// create creates a sandbox of image. While its create waits, the
	// driver says which image the node pulls (PullOf, what the API shows
	// of a sandbox in state creating); create returns what it said.
	create := func(t *testing.T, d *Driver, image, runtime string) (sandbox.Instance, []sandbox.ImagePull) {
		id := sandbox.NewID()
		stop := make(chan struct{})
		seen := make(chan []sandbox.ImagePull, 1)
		go func() {
			var s []sandbox.ImagePull
			defer func() { seen <- s }()
			for {
				if p, ok := d.PullOf(id); ok {
					s = append(s, p)
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		sb, err := d.Create(ctx, sandbox.Spec{ID: id, Image: image, Runtime: runtime})
		close(stop)
		pulls := <-seen
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Logf("create, the image pulled by the node: %v; the pull seen %d times", time.Since(start).Round(time.Millisecond), len(pulls))
		if p, ok := d.PullOf(id); ok {
			t.Errorf("a pull after the create: %+v", p)
		}
		return sb, pulls
	}
	// run creates a sandbox of image, and checks that python3 runs with
	// the image's environment and directory.
	run := func(t *testing.T, d *Driver, image, runtime string) *corev1.Pod {
		sb, _ := create(t, d, image, runtime)
		defer sb.Close(context.WithoutCancel(ctx))
		var out, errOut strings.Builder
		res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", script}, Stdout: &out, Stderr: &errOut})
		if err != nil || res.ExitCode != 0 || out.String() != "3 from the image "+registry.RootWorkDir+"\n" {
			t.Errorf("python3: %v, %+v, %q %q", err, res, out.String(), errOut.String())
		}
		// The kubelet's additions are not the workload's.
		out.Reset()
		if _, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"env"}, Stdout: &out}); err != nil || strings.Contains(out.String(), "KUBERNETES_") || !strings.Contains(out.String(), "PATH="+strings.TrimPrefix(registry.RootEnv[0], "PATH=")) {
			t.Errorf("env: %v %q", err, out.String())
		}
		pod, err := r.c.Client.CoreV1().Pods(r.ns).Get(ctx, hostOf(t, sb).name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}

	// Without credentials the create fails as soon as the kubelet says
	// the pull failed (ErrImagePull), not at the start timeout.
	t.Run("no credentials", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		const timeout = 2 * time.Minute // the default
		d := newDriver(t, Options{RuntimeClass: RuntimeClassNone, StartTimeout: timeout, PullCredentials: authn.DefaultKeychain})
		start := time.Now()
		sb, err := d.Create(ctx, sandbox.Spec{Image: ref})
		took := time.Since(start)
		if err == nil {
			sb.Close(ctx)
			t.Fatal("a Pod ran an image of a private registry without its credentials")
		}
		t.Logf("create without credentials failed after %v: %v", took.Round(time.Millisecond), err)
		if msg := err.Error(); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(msg, "the node could not pull it (") || !strings.Contains(msg, "ImagePull") ||
			!strings.Contains(msg, ref) || !strings.Contains(msg, "AIRLOCK_KUBE_PULL_SECRETS") {
			t.Errorf("create: %v, want the image, the kubelet's ErrImagePull and what to check", err)
		}
		if took > timeout/4 {
			t.Errorf("the failed pull took %v to fail the create, want well under the start timeout %v", took, timeout)
		}
	})
	t.Run("docker config", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(dockerConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DOCKER_CONFIG", dir)
		d := newDriver(t, Options{RuntimeClass: RuntimeClassNone, PullCredentials: authn.DefaultKeychain})
		// A first sandbox holds the Secret while the second comes and
		// goes; the node's pull of its image shows while it is created.
		first, pulls := create(t, d, slowRef, RuntimeClassNone)
		defer first.Close(context.WithoutCancel(ctx))
		if !slices.ContainsFunc(pulls, func(p sandbox.ImagePull) bool { return p.Image == slowRef }) {
			t.Errorf("the node's pull of %s was not seen while the create waited: %+v", slowRef, pulls)
		}
		pod := run(t, d, slowRef, RuntimeClassNone)
		if len(pod.Spec.ImagePullSecrets) != 1 || !strings.HasPrefix(pod.Spec.ImagePullSecrets[0].Name, "airlock-pull-") {
			t.Fatalf("imagePullSecrets %+v, want the one the driver made", pod.Spec.ImagePullSecrets)
		}
		if len(pod.Spec.SchedulingGates) != 0 {
			t.Errorf("the Pod ran with scheduling gates %+v", pod.Spec.SchedulingGates)
		}
		// The Secret is owned by the Pods that pull with it, and goes
		// with the last of them (Kubernetes' garbage collector).
		name := pod.Spec.ImagePullSecrets[0].Name
		secrets := r.c.Client.CoreV1().Secrets(r.ns)
		time.Sleep(3 * time.Second) // the collector's time to act, were it to delete it
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Secret went with one of the two sandboxes that pull with it: %v", err)
		}
		firstPod := hostOf(t, first).name
		if !slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Pod" && o.Name == firstPod }) {
			t.Errorf("Secret %s's owners %+v lack the Pod %s that pulls with it", name, s.OwnerReferences, firstPod)
		}
		if err := first.Close(ctx); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			s, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("Secret %s is still there a minute after its sandbox ended (owners %+v, its Pod %s)", name, s.OwnerReferences, pod.UID)
			}
		}
	})
	t.Run("named secret", func(t *testing.T) {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "team-registry"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(dockerConfig)},
		}
		if _, err := r.c.Client.CoreV1().Secrets(r.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := newDriver(t, Options{RuntimeClass: kube.RuntimeClassGvisor, PullSecrets: []string{"team-registry"}})
		pod := run(t, d, ref, kube.RuntimeClassGvisor)
		if !slices.Equal(pod.Spec.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "team-registry"}}) {
			t.Errorf("imagePullSecrets %+v", pod.Spec.ImagePullSecrets)
		}
	})
	// A warm pool's Pod pulls with the Secret too, and the sandbox a
	// claim makes of it keeps the image's environment under the claim's.
	t.Run("warm pool", func(t *testing.T) {
		shape := sandbox.Spec{Image: ref, Runtime: RuntimeClassNone}
		d := newDriver(t, Options{RuntimeClass: RuntimeClassNone, PullSecrets: []string{"team-registry"},
			Pools: []Pool{{Name: "image", Spec: shape, Size: 1}}})
		if err := d.FillPools(ctx); err != nil {
			t.Fatalf("fill the pool: %v", err)
		}
		t.Cleanup(func() { deletePool(t, d) })
		ready := waitPool(t, d, 1)
		spec := shape
		spec.Env = []string{"CLAIM=1"}
		sb, err := d.Create(ctx, spec)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		defer sb.Close(context.WithoutCancel(ctx))
		if name := hostOf(t, sb).name; !slices.Contains(ready, name) {
			t.Errorf("the sandbox's Pod %s is not the pool's %v", name, ready)
		}
		var out strings.Builder
		if res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo "$CLAIM $GREETING $(pwd)"`}, Stdout: &out}); err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v %v", res, err)
		}
		if got, want := out.String(), "1 from the image "+registry.RootWorkDir+"\n"; got != want {
			t.Errorf("a claimed sandbox's environment and directory say %q, want %q", got, want)
		}
	})
}
