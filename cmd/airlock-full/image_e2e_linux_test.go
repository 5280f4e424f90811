package main

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig/registry"
)

// TestE2EImage: an image pushed to a registry on loopback is pulled by
// `airlock image pull` (and by `airlock run --image`), runs on native and
// gVisor with its environment and working directory on a read-only root,
// is listed and removed.
func TestE2EImage(t *testing.T) {
	requireE2E(t)
	testcap.Require(t, "registry")
	r, err := registry.Run(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	img, err := registry.SmallImage()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Push("test/small:1", img)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"AIRLOCK_CACHE=" + t.TempDir(), "AIRLOCK_INSECURE_REGISTRIES=" + r.Host}
	image := func(args ...string) outcomeOf {
		return airlockRun(t, invocation{args: append([]string{"image"}, args...), env: env})
	}
	run := func(args ...string) outcomeOf {
		return airlockRun(t, invocation{args: append([]string{"run"}, args...), env: env})
	}
	script := `echo "$GREETING"; pwd; { echo x > /x; } 2>/dev/null || echo read-only; echo y > /workspace/y && echo writable`
	want := "from the image\n/srv\nread-only\nwritable\n"

	// A first run pulls, with a line per layer (stderr is no terminal).
	o := run("--image", ref, "--", "sh", "-c", script)
	if o.code != 0 || o.stdout != want || !strings.Contains(o.stderr, "layer 1/1") {
		t.Fatalf("run --image (pulling): %d %q %q, want %q and a progress line", o.code, o.stdout, o.stderr, want)
	}
	// Then the cache has it: no progress, the same digest.
	o = image("pull", "--quiet", ref)
	if o.code != 0 || !strings.HasPrefix(o.stdout, "sha256:") || o.stderr != "" {
		t.Fatalf("image pull --quiet: %d %q %q", o.code, o.stdout, o.stderr)
	}
	digest := strings.TrimSpace(o.stdout)
	o = run("--image", ref, "--", "sh", "-c", script)
	if o.code != 0 || o.stdout != want || o.stderr != "" {
		t.Errorf("run --image (cached): %d %q %q", o.code, o.stdout, o.stderr)
	}
	t.Run("gvisor", func(t *testing.T) {
		testcap.Require(t, "runsc")
		o := run("--driver", "gvisor", "--image", r.Host+"/test/small@"+digest, "--", "sh", "-c", script)
		if o.code != 0 || o.stdout != want {
			t.Errorf("gvisor run --image: %d %q %q", o.code, o.stdout, o.stderr)
		}
	})
	o = run("--image", ref, "--root", "/", "--", "true")
	if o.code != 125 || !strings.Contains(o.stderr, "--root and --image") {
		t.Errorf("--root with --image: %d %q", o.code, o.stderr)
	}
	o = image("ls")
	if o.code != 0 || !strings.Contains(o.stdout, ref) || !strings.Contains(o.stdout, digest[:19]) {
		t.Errorf("image ls: %d %q %q", o.code, o.stdout, o.stderr)
	}
	if o = image("rm", ref); o.code != 0 {
		t.Errorf("image rm: %d %q", o.code, o.stderr)
	}
	if o = image("ls"); strings.Contains(o.stdout, ref) {
		t.Errorf("image ls after rm: %q", o.stdout)
	}
}
