package supervisor

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// imageDriver is the fake driver as a driver that runs images from their
// unpacked root (native, gVisor), recording the specs it is given.
type imageDriver struct{ *fake.Driver }

func (d imageDriver) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.HostRoot, c.Images, c.ImageRoot = true, true, true
	return c
}

type fakeImages struct{ calls atomic.Int64 }

func (f *fakeImages) ImageRoot(_ context.Context, ref string) (string, []string, error) {
	f.calls.Add(1)
	if ref == "registry.example/missing:1" {
		return "", nil, errors.New("not found")
	}
	return "/cache/roots/abc/rootfs", []string{"PATH=/opt/bin", "FROM=image"}, nil
}

// TestTemplateImageRoot: a template's image on a driver that runs images
// from their unpacked root is unpacked (Options.Images) at create, the
// root and the image's environment (under the template's) going to the
// driver; without an image source, the daemon refuses the template.
func TestTemplateImageRoot(t *testing.T) {
	tmpl := Template{Name: "default", Image: "registry.example/py:3", Env: []string{"FROM=template"}}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drv := &fake.Driver{}
	imgs := &fakeImages{}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": imageDriver{drv}}, Images: imgs,
		Config: Config{Templates: []Template{tmpl, {Name: "missing", Image: "registry.example/missing:1"}}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	if _, err := sup.Create(context.Background(), alice, CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	specs := drv.Specs()
	if len(specs) != 1 || specs[0].Root != "/cache/roots/abc/rootfs" || specs[0].Image != tmpl.Image ||
		!slices.Equal(specs[0].Env, []string{"PATH=/opt/bin", "FROM=image", "FROM=template"}) {
		t.Errorf("the driver got %+v", specs)
	}
	if _, err := sup.Create(context.Background(), alice, CreateRequest{Template: "missing"}); err == nil {
		t.Error("created a sandbox of an image that could not be unpacked")
	}
	if n := len(drv.Specs()); n != 1 {
		t.Errorf("the driver made %d sandboxes, want 1", n)
	}
}
