package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// enginePulling is a driver whose engine pulls the image itself (as
// Docker's and Kubernetes' do, sandbox.PullReporter): its create waits
// for release, and says meanwhile how far the pull is.
type enginePulling struct {
	*fake.Driver
	release chan struct{}
	mu      sync.Mutex
	pulling map[string]bool
}

func (d *enginePulling) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.Images = true
	return c
}

func (d *enginePulling) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	d.mu.Lock()
	d.pulling[spec.ID] = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.pulling, spec.ID)
		d.mu.Unlock()
	}()
	select {
	case <-d.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	spec.Image = ""
	return d.Driver.Create(ctx, spec)
}

func (d *enginePulling) PullOf(id string) (sandbox.ImagePull, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return sandbox.ImagePull{Image: "registry.example/py:3", Layer: 1, Layers: 2, Bytes: 5 << 20}, d.pulling[id]
}

// TestListShowsEnginePull: while a create waits for its driver's engine
// to pull the image, GET /v1/sandboxes and /v1/sandboxes/{id} show the
// sandbox creating with the pull; once created, without.
func TestListShowsEnginePull(t *testing.T) {
	drv := &enginePulling{Driver: &fake.Driver{}, release: make(chan struct{}), pulling: map[string]bool{}}
	e := startEnv(t, drv, envOptions{cfg: supervisor.Config{Templates: []supervisor.Template{{Name: "default", Image: "registry.example/py:3"}}}})
	release := sync.OnceFunc(func() { close(drv.release) })
	defer release() // before the env's cleanup, which waits for the create
	c := e.agent()
	ctx := context.Background()
	created := make(chan error, 1)
	go func() {
		_, err := c.CreateSandbox(ctx, client.CreateRequest{})
		created <- err
	}()
	var waiting client.Sandbox
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list, err := c.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].Pull != nil {
			waiting = list[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox listed with its engine's pull while its create waits: %+v", list)
		}
	}
	want := client.Pull{Image: "registry.example/py:3", Layer: 1, Layers: 2, Bytes: 5 << 20}
	if waiting.State != "creating" || *waiting.Pull != want {
		t.Errorf("listed while the engine pulls: state %s, pull %+v, want %+v", waiting.State, waiting.Pull, want)
	}
	if got, err := c.GetSandbox(ctx, waiting.ID); err != nil || got.Pull == nil || *got.Pull != want {
		t.Errorf("got while the engine pulls: %v, %+v", err, got)
	}
	release()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSandbox(ctx, waiting.ID); err != nil || got.State != "running" || got.Pull != nil {
		t.Errorf("created: %v, %+v", err, got)
	}
}
