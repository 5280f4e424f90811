package kubernetes

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
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
	auth := base64.StdEncoding.EncodeToString([]byte(reg.User + ":" + reg.Password))
	dockerConfig := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Host, auth)
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
	run := func(t *testing.T, d *Driver, runtime string) *corev1.Pod {
		start := time.Now()
		sb, err := d.Create(ctx, sandbox.Spec{Image: ref, Runtime: runtime})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		defer sb.Close(context.WithoutCancel(ctx))
		t.Logf("create, the image pulled by the node: %v", time.Since(start).Round(time.Millisecond))
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

	t.Run("no credentials", func(t *testing.T) {
		t.Setenv("DOCKER_CONFIG", t.TempDir())
		d := newDriver(t, Options{RuntimeClass: RuntimeClassNone, StartTimeout: 30 * time.Second, PullCredentials: authn.DefaultKeychain})
		sb, err := d.Create(ctx, sandbox.Spec{Image: ref})
		if err == nil {
			sb.Close(ctx)
			t.Fatal("a Pod ran an image of a private registry without its credentials")
		}
		if !strings.Contains(err.Error(), "ImagePull") {
			t.Errorf("create: %v, want the failed pull", err)
		}
	})
	t.Run("docker config", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(dockerConfig), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DOCKER_CONFIG", dir)
		d := newDriver(t, Options{RuntimeClass: RuntimeClassNone, PullCredentials: authn.DefaultKeychain})
		pod := run(t, d, RuntimeClassNone)
		if len(pod.Spec.ImagePullSecrets) != 1 || !strings.HasPrefix(pod.Spec.ImagePullSecrets[0].Name, "airlock-pull-") {
			t.Errorf("imagePullSecrets %+v, want the one the driver made", pod.Spec.ImagePullSecrets)
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
		pod := run(t, d, kube.RuntimeClassGvisor)
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
