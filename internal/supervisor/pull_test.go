package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// pullingImages is an image source whose pull waits for release, and says
// how far it is (ImagePulls) meanwhile.
type pullingImages struct {
	fakeImages
	release chan struct{}
	done    atomic.Bool
}

func (p *pullingImages) ImageRoot(ctx context.Context, ref string) (ImageRun, error) {
	select {
	case <-p.release:
	case <-ctx.Done():
		return ImageRun{}, ctx.Err()
	}
	p.done.Store(true)
	return p.fakeImages.ImageRoot(ctx, ref)
}

func (p *pullingImages) PullOf(ref string) (ImagePull, bool) {
	if p.done.Load() || ref != "registry.example/py:3" {
		return ImagePull{}, false
	}
	return ImagePull{Image: ref, Layer: 2, Layers: 3, Bytes: 12 << 20}, true
}

// TestCreateShowsPull: while a create waits for its image's pull, the
// sandbox is listed (and got) in state creating with the pull's layers
// and bytes; once created, without.
func TestCreateShowsPull(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	imgs := &pullingImages{release: make(chan struct{})}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": imageDriver{&fake.Driver{}, new([]string)}}, Images: imgs,
		Config: Config{Templates: []Template{{Name: "default", Image: "registry.example/py:3"}}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	type result struct {
		info Info
		err  error
	}
	created := make(chan result, 1)
	go func() {
		info, err := sup.Create(context.Background(), alice, CreateRequest{})
		created <- result{info, err}
	}()
	var waiting Info
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list, err := sup.List(context.Background(), alice, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].Pull != nil {
			waiting = list[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox listed with its pull while its create waits: %+v", list)
		}
	}
	if waiting.State != store.StateCreating || *waiting.Pull != (ImagePull{Image: "registry.example/py:3", Layer: 2, Layers: 3, Bytes: 12 << 20}) {
		t.Errorf("while pulling: state %s, pull %+v", waiting.State, waiting.Pull)
	}
	if got, err := sup.Get(context.Background(), alice, waiting.ID); err != nil || got.Pull == nil {
		t.Errorf("get while pulling: %v, pull %+v", err, got.Pull)
	}
	close(imgs.release)
	r := <-created
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.info.State != store.StateRunning || r.info.Pull != nil {
		t.Errorf("created: state %s, pull %+v", r.info.State, r.info.Pull)
	}
}

// engineDriver is a driver whose engine pulls the image itself
// (sandbox.PullReporter, as Docker's and Kubernetes'): its create waits
// for release, and says meanwhile how far the pull is.
type engineDriver struct {
	*fake.Driver
	release chan struct{}
	mu      sync.Mutex
	pulling map[string]string // sandbox id → image, while its create waits
}

func (d *engineDriver) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.Images = true
	return c
}

func (d *engineDriver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	d.mu.Lock()
	d.pulling[spec.ID] = spec.Image
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

func (d *engineDriver) PullOf(id string) (sandbox.ImagePull, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	img, ok := d.pulling[id]
	return sandbox.ImagePull{Image: img, Layer: 1, Layers: 2, Bytes: 5 << 20}, ok
}

// TestCreateShowsEnginePull: a driver whose engine pulls (Docker,
// Kubernetes) shows its pull the same way: the sandbox is listed in state
// creating with the pull the driver reports for it, and without once
// created. The image source is not asked: the driver unpacks nothing.
func TestCreateShowsEnginePull(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drv := &engineDriver{Driver: &fake.Driver{DriverName: "docker"}, release: make(chan struct{}), pulling: map[string]string{}}
	imgs := &pullingImages{release: make(chan struct{})} // would say layer 2 of 3 if asked
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"docker": drv}, Images: imgs,
		Config: Config{Templates: []Template{{Name: "default", Driver: "docker", Image: "registry.example/py:3"}}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	release := sync.OnceFunc(func() { close(drv.release) })
	defer release() // before Close, which waits for the create
	created := make(chan error, 1)
	go func() {
		_, err := sup.Create(context.Background(), alice, CreateRequest{})
		created <- err
	}()
	var waiting Info
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		list, err := sup.List(context.Background(), alice, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].Pull != nil {
			waiting = list[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sandbox listed with the engine's pull while its create waits: %+v", list)
		}
	}
	if want := (ImagePull{Image: "registry.example/py:3", Layer: 1, Layers: 2, Bytes: 5 << 20}); waiting.State != store.StateCreating || *waiting.Pull != want {
		t.Errorf("while the engine pulls: state %s, pull %+v, want %+v", waiting.State, waiting.Pull, want)
	}
	release()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	got, err := sup.Get(context.Background(), alice, waiting.ID)
	if err != nil || got.State != store.StateRunning || got.Pull != nil {
		t.Errorf("created: %v, state %s, pull %+v", err, got.State, got.Pull)
	}
}
