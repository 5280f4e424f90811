package docker

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/dockerd"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// TestPullMissingImage: an image the engine does not have is pulled
// through the engine (from a registry on loopback, which the engine
// trusts over plain HTTP), and runs with its environment.
func TestPullMissingImage(t *testing.T) {
	requireRuntime(t, DefaultRuntime)
	testcap.Require(t, "registry")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := registry.Run(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	img, err := registry.SmallImage()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Push("test/pull:1", img)
	if err != nil {
		t.Fatal(err)
	}
	cli := engineClient(t)
	defer cli.ImageRemove(context.WithoutCancel(ctx), ref, client.ImageRemoveOptions{Force: true})
	var progress bytes.Buffer
	d, err := New(Options{Instance: testInstance(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := d.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Image: ref, Limits: smallLimits})
	if err != nil {
		t.Fatalf("create from an image the engine lacks: %v", err)
	}
	defer sb.Close(context.WithoutCancel(ctx))
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo "$GREETING"`}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "from the image\n" {
		t.Errorf("run: %v, %+v, %q", err, res, out.String())
	}
	// As airlock's own pull shows it (not a terminal: a line per layer).
	if p := progress.String(); !strings.HasPrefix(p, "pulling "+ref+"\n") || !strings.Contains(p, "\nlayer 1/1 ") || !strings.HasSuffix(p, "\n"+ref+": sha256:"+p[len(p)-65:]) {
		t.Errorf("progress %q: want the pull, its layer and the digest", p)
	}
}

// TestPullPythonImage: an image of a Debian root with python3 (the test
// rigs' debootstrap root as one layer, pushed to a registry on loopback)
// is pulled by the engine and runs python3 with the image's environment
// and working directory, on runc and on runsc.
func TestPullPythonImage(t *testing.T) {
	requireDocker(t)
	testcap.Require(t, "registry")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := rootimage.Ensure(ctx, testrig.CacheDir(), dockerd.ImageSpec, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := registry.Run(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	img, err := registry.RootImage(root.Path)
	if err != nil {
		t.Fatal(err)
	}
	// A layer of its own on top (16 MiB of random bytes, which the
	// engine cannot have: the rig's own image shares the root's layer),
	// fetched through a proxy slowed to 8 MiB/s, so that the pull lasts
	// while the test watches it.
	own, err := random.Layer(16<<20, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, own); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Push("test/python:3", img); err != nil {
		t.Fatal(err)
	}
	slow, stopSlow, err := testrig.SlowProxy(r.Host, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSlow()
	ref := slow + "/test/python:3"
	cli := engineClient(t)
	script := `import os, sys; print(sys.version.split()[0].split(".")[0], os.environ["GREETING"], os.getcwd())`
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			// Each runtime's create pulls: the engine lacks the image.
			_, _ = cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})
			defer cli.ImageRemove(context.WithoutCancel(ctx), ref, client.ImageRemoveOptions{Force: true})
			var progress bytes.Buffer
			d, err := New(Options{Instance: testInstance(), Runtime: rt, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			// While the create waits, the driver says how far the
			// engine's pull is (PullOf: what the API shows of a sandbox
			// in state creating).
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
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			start := time.Now()
			sb, err := d.Create(ctx, sandbox.Spec{ID: id, Image: ref, Limits: smallLimits})
			close(stop)
			pulls := <-seen
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			defer sb.Close(context.WithoutCancel(ctx))
			if !strings.HasPrefix(progress.String(), "pulling "+ref+"\n") {
				t.Errorf("progress %q: want the pull", progress.String())
			}
			var most int64
			for _, p := range pulls {
				if p.Image != ref || p.Layers > 2 || p.Layer > p.Layers || p.Bytes < most {
					t.Errorf("the pull as the driver said it: %+v (of %d), want %s, two layers, bytes that only grow", p, len(pulls), ref)
					break
				}
				most = p.Bytes
			}
			t.Logf("create with the engine's pull: %v; the pull seen %d times, last %+v", time.Since(start).Round(time.Millisecond), len(pulls), pulls[max(len(pulls)-1, 0):])
			// The layer of its own came while the test watched: 16 MiB
			// of random bytes are about that much compressed.
			if len(pulls) == 0 || most < 8<<20 || pulls[len(pulls)-1].Layers != 2 {
				t.Errorf("the pull while the create waited: %d seen, %d bytes at most; want it seen with its two layers and the bytes of its own", len(pulls), most)
			}
			if p, ok := d.PullOf(id); ok {
				t.Errorf("a pull after the create: %+v", p)
			}
			var out, errOut bytes.Buffer
			res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", script}, Stdout: &out, Stderr: &errOut})
			if err != nil || res.ExitCode != 0 || out.String() != "3 from the image "+registry.RootWorkDir+"\n" {
				t.Errorf("python3 on %s: %v, %+v, %q %q", rt, err, res, out.String(), errOut.String())
			}
		})
	}
}

// TestEnginePullProgress: the engine's messages for a pull of two layers
// (fetched at once, as the engine does) make how far the pull is: the
// layer one past those done, of those named, and the bytes come so far
// of every layer.
func TestEnginePullProgress(t *testing.T) {
	const ref = "registry.example/py:3"
	p := &enginePull{ref: ref}
	msg := func(id, status string, cur, total int64) jsonstream.Message {
		m := jsonstream.Message{ID: id, Status: status}
		if total > 0 {
			m.Progress = &jsonstream.Progress{Current: cur, Total: total}
		}
		return m
	}
	for _, step := range []struct {
		m    jsonstream.Message
		want sandbox.ImagePull
	}{
		{jsonstream.Message{ID: "3", Status: "Pulling from registry.example/py"}, sandbox.ImagePull{Image: ref}},
		{msg("a", "Pulling fs layer", 0, 0), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 1}},
		{msg("b", "Pulling fs layer", 0, 0), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 2}},
		{msg("a", "Downloading", 100, 1000), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 2, Bytes: 100}},
		{msg("b", "Downloading", 50, 500), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 2, Bytes: 150}},
		{msg("b", "Download complete", 0, 0), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 2, Bytes: 600}},
		{msg("b", "Extracting", 200, 4000), sandbox.ImagePull{Image: ref, Layer: 1, Layers: 2, Bytes: 600}},
		{msg("b", "Pull complete", 0, 0), sandbox.ImagePull{Image: ref, Layer: 2, Layers: 2, Bytes: 600}},
		{msg("a", "Downloading", 900, 1000), sandbox.ImagePull{Image: ref, Layer: 2, Layers: 2, Bytes: 1400}},
		{msg("a", "Pull complete", 0, 0), sandbox.ImagePull{Image: ref, Layer: 2, Layers: 2, Bytes: 1500}},
		{jsonstream.Message{Status: "Digest: sha256:0123"}, sandbox.ImagePull{Image: ref, Layer: 2, Layers: 2, Bytes: 1500}},
	} {
		p.track(step.m)
		_, _ = p.event(ref, step.m)
		if got := p.progress(); got != step.want {
			t.Errorf("after %s %q: %+v, want %+v", step.m.ID, step.m.Status, got, step.want)
		}
	}
}
