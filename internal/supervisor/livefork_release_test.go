package supervisor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// releasingDriver is a live-forking fake that keeps something of each
// checkpoint until its release, as the microVM driver keeps the memory
// its clones share.
type releasingDriver struct {
	*fake.Driver
	cloning  atomic.Int32
	mu       sync.Mutex
	released []string
	bad      []string
}

func (d *releasingDriver) Clone(ctx context.Context, spec sandbox.Spec, state []byte, dir string) (sandbox.Instance, error) {
	d.cloning.Add(1)
	defer d.cloning.Add(-1)
	return d.Driver.Clone(ctx, spec, state, dir)
}

func (d *releasingDriver) ReleaseCheckpoint(dir string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.released = append(d.released, dir)
	if n := d.cloning.Load(); n != 0 {
		d.bad = append(d.bad, "released with clones starting")
	}
	if _, err := os.Stat(dir); err != nil {
		d.bad = append(d.bad, "released after its directory went: "+err.Error())
	}
}

// TestLiveForkReleases: a driver that keeps a checkpoint's memory for its
// clones is told to let go of it once, after every clone started and
// before the directory goes.
func TestLiveForkReleases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drv := &releasingDriver{Driver: &fake.Driver{LiveForkable: true}}
	tmpl := Template{Name: DefaultTemplate, TTL: Duration(time.Hour), IdleTimeout: Duration(10 * time.Minute), PausedTTL: Duration(48 * time.Hour)}
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv},
		Config:       Config{StateDir: dir, Templates: []Template{tmpl}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sup.LiveFork(ctx, alice, LiveForkRequest{Sandbox: in.ID, Count: 3})
	if err != nil || len(res.Sandboxes) != 3 {
		t.Fatalf("live fork: %+v %v", res, err)
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.released) != 1 || len(drv.bad) != 0 {
		t.Fatalf("releases %q, wrong: %q", drv.released, drv.bad)
	}
	if _, err := os.Stat(drv.released[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the checkpoint's directory is left: %v", err)
	}
}
