package docker

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

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
	ref, err := r.Push("test/python:3", img)
	if err != nil {
		t.Fatal(err)
	}
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
			sb, err := d.Create(ctx, sandbox.Spec{ID: sandbox.NewID(), Image: ref, Limits: smallLimits})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			defer sb.Close(context.WithoutCancel(ctx))
			if !strings.HasPrefix(progress.String(), "pulling "+ref+"\n") {
				t.Errorf("progress %q: want the pull", progress.String())
			}
			var out, errOut bytes.Buffer
			res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"python3", "-c", script}, Stdout: &out, Stderr: &errOut})
			if err != nil || res.ExitCode != 0 || out.String() != "3 from the image "+registry.RootWorkDir+"\n" {
				t.Errorf("python3 on %s: %v, %+v, %q %q", rt, err, res, out.String(), errOut.String())
			}
		})
	}
}
