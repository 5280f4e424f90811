package docker

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/airlock-sandbox/airlock/internal/registry"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/testcap"
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
	if p := progress.String(); !strings.HasPrefix(p, "pulling "+ref) || !strings.Contains(p, ": pull complete\n") {
		t.Errorf("progress %q: want the pull and its layer", p)
	}
}
