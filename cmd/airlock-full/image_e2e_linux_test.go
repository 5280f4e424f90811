package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
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
	env := []string{"AIRLOCK_IMAGE_CACHE=" + t.TempDir(), "AIRLOCK_INSECURE_REGISTRIES=" + r.Host}
	image := func(args ...string) outcomeOf {
		return airlockRun(t, invocation{args: append([]string{"image"}, args...), env: env})
	}
	run := func(args ...string) outcomeOf {
		return airlockRun(t, invocation{args: append([]string{"run"}, args...), env: env})
	}
	script := `echo "$GREETING"; pwd; { echo x > /x; } 2>/dev/null || echo read-only; echo y > /workspace/y && echo writable`
	want := "from the image\n/srv\nread-only\nwritable\n"

	// The policy's images and require_image_digest refuse a run or a
	// pull outside them, naming the rule, before anything is fetched.
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("images = [\""+r.Host+"/test/*\"]\nrequire_image_digest = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []outcomeOf{run("--policy", pol, "--image", ref, "--", "true"), image("pull", "--policy", pol, ref)} {
		if o.code == 0 || !strings.Contains(o.stderr, "require_image_digest") {
			t.Errorf("a tag under require_image_digest: %d %q %q", o.code, o.stdout, o.stderr)
		}
	}
	if o := image("pull", "--policy", pol, r.Host+"/other/x@sha256:"+strings.Repeat("0", 64)); o.code == 0 || !strings.Contains(o.stderr, "(images)") {
		t.Errorf("an image outside the policy's images: %d %q", o.code, o.stderr)
	}
	if o := image("ls"); strings.Contains(o.stdout, ref) {
		t.Errorf("a refused image was pulled: %q", o.stdout)
	}

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
	// The audit log's create event names the image and the digest run.
	logDir := t.TempDir()
	alog := filepath.Join(logDir, "audit.log")
	if o := run("--audit-log", alog, "--audit-key", filepath.Join(logDir, "keys", "audit.key"), "--image", ref, "--", "sh", "-c", "exit 0"); o.code != 0 {
		t.Errorf("run --audit-log: %d %q", o.code, o.stderr)
	}
	if b, _ := os.ReadFile(alog); !strings.Contains(string(b), `"image_digest":"`+digest+`"`) {
		t.Errorf("the run's audit log has no create event with the digest %s: %s", digest, b)
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
	// Saved and loaded into another cache, the image runs the same.
	saved := filepath.Join(t.TempDir(), "small.tar")
	if o := image("save", ref, saved); o.code != 0 {
		t.Errorf("image save: %d %q", o.code, o.stderr)
	}
	other := []string{"AIRLOCK_IMAGE_CACHE=" + t.TempDir()}
	if o := airlockRun(t, invocation{args: []string{"image", "load", "--quiet", saved}, env: other}); o.code != 0 || !strings.Contains(o.stdout, ref) {
		t.Errorf("image load of the saved image: %d %q %q", o.code, o.stdout, o.stderr)
	}
	if o := airlockRun(t, invocation{args: []string{"run", "--image", ref, "--", "sh", "-c", script}, env: other}); o.code != 0 || o.stdout != want || o.stderr != "" {
		t.Errorf("run of the loaded image (no registry asked): %d %q %q", o.code, o.stdout, o.stderr)
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

// TestE2EImagePython: an image of a Debian root with python3 (the test
// rigs' debootstrap root, pushed as one layer) is pulled once and runs
// python3 with the image's environment and working directory on native
// and gVisor. It logs what the pull and a cached run take, beside a run
// on the composed root.
func TestE2EImagePython(t *testing.T) {
	requireE2E(t)
	testcap.Require(t, "registry", "debroot")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := rootimage.Ensure(ctx, testrig.CacheDir(), rootimage.Spec{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Run(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	layer, err := tarball.LayerFromFile(root.Path, tarball.WithCompressionLevel(1))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from the image"}
	cf.Config.WorkingDir = "/srv"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := r.Push("test/python:3", img)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := layer.Size()
	env := []string{"AIRLOCK_IMAGE_CACHE=" + t.TempDir(), "AIRLOCK_INSECURE_REGISTRIES=" + r.Host}
	start := time.Now()
	o := airlockRun(t, invocation{args: []string{"image", "pull", "--quiet", ref}, env: env})
	if o.code != 0 {
		t.Fatalf("image pull: %d %q", o.code, o.stderr)
	}
	t.Logf("pull and unpack of a %d MB image (one layer, %d MB unpacked): %v", size>>20, fileSize(t, root.Path)>>20, time.Since(start).Round(time.Millisecond))
	script := `import os, sys; print(sys.version_info[0], os.environ["GREETING"], os.getcwd())`
	for _, driver := range []string{"native", "gvisor", "microvm"} {
		t.Run(driver, func(t *testing.T) {
			switch driver {
			case "gvisor":
				testcap.Require(t, "runsc")
			case "microvm":
				testcap.Require(t, "qemu")
				// The first run makes the image's root into a disk
				// image and boots it: longer than airlockRun allows.
				ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
				defer cancel()
				start := time.Now()
				cmd := airlockCmd(ctx, invocation{args: []string{"run", "--driver", driver, "--image", ref, "--", "true"}, env: env})
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("first microvm run of the image: %v: %s", err, out)
				}
				t.Logf("microvm: first run of the image (its disk image made): %v", time.Since(start).Round(time.Millisecond))
			}
			o := airlockRun(t, invocation{args: []string{"run", "--driver", driver, "--image", ref, "--", "python3", "-c", script}, env: env})
			if o.code != 0 || o.stdout != "3 from the image /srv\n" {
				t.Fatalf("python3 on %s: %d %q %q", driver, o.code, o.stdout, o.stderr)
			}
			var cached, composed time.Duration
			for range 3 {
				o := airlockRun(t, invocation{args: []string{"run", "--driver", driver, "--image", ref, "--", "python3", "-c", "pass"}, env: env})
				cached += o.took
				o = airlockRun(t, invocation{args: []string{"run", "--driver", driver, "--", "python3", "-c", "pass"}, env: env})
				composed += o.took
			}
			t.Logf("%s: python3 -c pass, 3 runs: image (cached) %v, composed root %v (%.2fx)", driver,
				cached.Round(time.Millisecond), composed.Round(time.Millisecond), float64(cached)/float64(composed))
		})
	}
}

func fileSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestE2EImageDaemon: a template's image on the native driver is pulled
// by the daemon at the first create (which says so in the log) and its
// sandboxes run on its root with its environment and working directory,
// created through airlock's API or E2B's (a [e2b] templates name mapped to
// the image's template); the policy's images allowlist refuses a
// template's image outside it, naming the rule; the audit log's create
// event records the digest the sandbox ran.
func TestE2EImageDaemon(t *testing.T) {
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
	ref, err := r.Push("test/daemon:1", img)
	if err != nil {
		t.Fatal(err)
	}
	outside, err := r.Push("other/daemon:1", img)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_IMAGE_CACHE", t.TempDir())
	t.Setenv("AIRLOCK_INSECURE_REGISTRIES", r.Host)
	state := filepath.Join(t.TempDir(), "state")
	o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", state, "--role", "agent", "--name", "agent"}})
	if o.code != 0 {
		t.Fatalf("keys create: %d %s", o.code, o.stderr)
	}
	key := strings.TrimSpace(o.stdout)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[[template]]\nname = \"default\"\n[[template]]\nname = \"small\"\nimage = \""+ref+"\"\n"+
		"[[template]]\nname = \"outside\"\nimage = \""+outside+"\"\n[e2b]\ntemplates = [\"base=default\", \"my-image=small\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("images = [\""+r.Host+"/test/*\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, "--config", cfg, "--policy", pol)
	env := []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + key}
	o = airlockRun(t, invocation{args: []string{"sandbox", "create", "--template", "small"}, env: env})
	if o.code != 0 {
		t.Fatalf("sandbox create: %d %q %q", o.code, o.stdout, o.stderr)
	}
	id := strings.TrimSpace(o.stdout)
	o = airlockRun(t, invocation{args: []string{"sandbox", "exec", id, "--", "sh", "-c", `echo "$GREETING"; echo /*; pwd`}, env: env})
	if o.code != 0 || o.stdout != "from the image\n/bin /dev /etc /home /lib /lib64 /proc /srv /tmp /workspace\n/srv\n" {
		t.Errorf("exec in the image's sandbox: %d %q %q", o.code, o.stdout, o.stderr)
	}
	if l := d.log(); !strings.Contains(l, "a create waits for its image") || !strings.Contains(l, "image pulled") {
		t.Errorf("the daemon did not log the pull: %s", l)
	}
	o = airlockRun(t, invocation{args: []string{"sandbox", "create", "--template", "outside"}, env: env})
	if o.code == 0 || !strings.Contains(o.stderr, "(images)") || !strings.Contains(o.stderr, outside) {
		t.Errorf("a template's image outside the policy's images: %d %q %q", o.code, o.stdout, o.stderr)
	}

	// E2B's SDKs create with POST /sandboxes and a template name.
	req, _ := http.NewRequest("POST", d.url+"/sandboxes", strings.NewReader(`{"templateID":"my-image"}`))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.SandboxID == "" {
		t.Fatalf("E2B create of my-image: %d %s", resp.StatusCode, body)
	}
	o = airlockRun(t, invocation{args: []string{"sandbox", "exec", created.SandboxID, "--", "sh", "-c", `echo "$GREETING"; pwd; echo /home/*`}, env: env})
	if o.code != 0 || o.stdout != "from the image\n/srv\n/home/user\n" {
		t.Errorf("exec in the E2B sandbox of the image: %d %q %q", o.code, o.stdout, o.stderr)
	}

	digest := airlockRun(t, invocation{args: []string{"image", "pull", "--quiet", ref}})
	o = airlockRun(t, invocation{args: []string{"audit", "tail", "-n", "100", filepath.Join(state, "audit.log")}})
	if want := `"image_digest":"` + strings.TrimSpace(digest.stdout) + `"`; digest.code != 0 || strings.Count(o.stdout, want) != 2 {
		t.Errorf("the audit log has %d create events with %s, want 2: %s", strings.Count(o.stdout, want), want, o.stdout)
	}
}
