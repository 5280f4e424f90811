package supervisor

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// imageDriver is the fake driver as a driver that runs images from their
// unpacked root (native, gVisor), recording the specs it is given.
type imageDriver struct {
	*fake.Driver
	dirs *[]string // the execs' directories, in order
}

func (d imageDriver) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.HostRoot, c.Images, c.ImageRoot = true, true, true
	return c
}

type fakeImages struct{ calls, holds, released atomic.Int64 }

func (f *fakeImages) ImageRoot(_ context.Context, ref string) (ImageRun, error) {
	f.calls.Add(1)
	if ref == "registry.example/missing:1" {
		return ImageRun{}, errors.New("not found")
	}
	return ImageRun{Root: "/cache/roots/abc/rootfs", Digest: "sha256:abc", Env: []string{"PATH=/opt/bin", "FROM=image"},
		WorkingDir: "/app", Release: func() { f.released.Add(1) }}, nil
}

// Create wraps the fake's sandboxes to record the execs' directories.
func (d imageDriver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	in, err := d.Driver.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &dirInstance{Instance: in.(*fake.Instance), dirs: d.dirs}, nil
}

type dirInstance struct {
	*fake.Instance
	dirs *[]string
}

func (in *dirInstance) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	*in.dirs = append(*in.dirs, req.Dir)
	return in.Instance.Start(ctx, req)
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
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": imageDriver{drv, new([]string)}}, Images: imgs,
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

// TestImageRunWorkDirAuditRelease: a sandbox of an image runs its execs in
// the image's working directory unless they name one, its create event
// in the audit log names the image and the digest it ran, and its image
// is released (evictable) when it ends, or when its create fails after
// the unpack; a policy's images allowlist and digest requirement refuse
// a create outside them, naming the rule, before anything is pulled.
func TestImageRunWorkDirAuditRelease(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	al, err := audit.Open(filepath.Join(dir, "audit.log"), audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	pol, err := policy.New(policy.File{Images: []string{"registry.example/py"}, RequireImageDigest: true})
	if err != nil {
		t.Fatal(err)
	}
	pinned := "registry.example/py@sha256:" + strings.Repeat("a", 64)
	drv := &fake.Driver{}
	dirs := new([]string)
	imgs := &fakeImages{}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": imageDriver{drv, dirs}}, Images: imgs, Audit: al, Policy: pol,
		Config: Config{Templates: []Template{{Name: "default", Image: pinned}, {Name: "tag", Image: "registry.example/py:3"},
			{Name: "other", Image: "registry.example/other@sha256:" + strings.Repeat("a", 64)}}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	for tmpl, rule := range map[string]string{"tag": "require_image_digest", "other": "images"} {
		_, err := sup.Create(context.Background(), alice, CreateRequest{Template: tmpl})
		var d *policy.Denied
		if !errors.As(err, &d) || d.Decision.Rule != rule {
			t.Errorf("template %s: %v, want a denial by %s", tmpl, err, rule)
		}
	}
	if n := imgs.calls.Load(); n != 0 {
		t.Errorf("%d images unpacked for refused creates", n)
	}
	info, err := sup.Create(context.Background(), alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"", "/workspace"} {
		if _, err := sup.Exec(context.Background(), alice, info.ID, ExecRequest{Argv: []string{"true"}, Dir: d}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(*dirs, []string{"/app", "/workspace"}) {
		t.Errorf("the execs ran in %q, want the image's /app, then /workspace as asked", *dirs)
	}
	if imgs.released.Load() != 0 {
		t.Error("the image was released while its sandbox runs")
	}
	if err := sup.Kill(context.Background(), alice, info.ID); err != nil {
		t.Fatal(err)
	}
	if n := imgs.released.Load(); n != 1 {
		t.Errorf("the image was released %d times after its sandbox ended, want 1", n)
	}
	drv.Fail = errors.New("no room")
	if _, err := sup.Create(context.Background(), alice, CreateRequest{}); err == nil {
		t.Fatal("created a sandbox on a failing driver")
	}
	if n := imgs.released.Load(); n != 2 {
		t.Errorf("released %d times after a failed create, want 2", n)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := al.Query(context.Background(), audit.Query{Kinds: []audit.Kind{audit.KindCreate}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) == 1 {
			var ev audit.Event
			if err := json.Unmarshal(p.Events[0], &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Image != pinned || ev.ImageDigest != "sha256:abc" {
				t.Errorf("create event: image %q digest %q", ev.Image, ev.ImageDigest)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d create events", len(p.Events))
		}
	}
}

func (f *fakeImages) HoldImage(digest string) (func(), error) {
	if digest != "sha256:abc" {
		return nil, errors.New("not cached")
	}
	f.holds.Add(1)
	return func() { f.released.Add(1) }, nil
}

// recoveringDriver is imageDriver whose sandboxes outlive the daemon.
type recoveringDriver struct{ imageDriver }

func (d recoveringDriver) Capabilities() sandbox.Capabilities {
	c := d.imageDriver.Capabilities()
	c.SurvivesRestart = true
	return c
}

func (d recoveringDriver) Recover(ctx context.Context, id string, _ []byte) (sandbox.Instance, error) {
	return d.Create(ctx, sandbox.Spec{ID: id})
}

// TestImageReattachHolds: a daemon that reattaches to a sandbox of an
// image holds its root again (until the sandbox ends) and runs its execs
// in the image's working directory, both from the sandbox's record.
func TestImageReattachHolds(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	if err := st.PutSandbox(store.Sandbox{ID: "sb-image", Owner: alice.KeyID, Template: "default", Driver: "native",
		Spec: sandbox.Spec{Image: "registry.example/py:3"}, State: store.StateRunning, Created: now, ExpiresAt: now.Add(time.Hour),
		DriverState: []byte("x"), ImageDigest: "sha256:abc", WorkDir: "/app"}); err != nil {
		t.Fatal(err)
	}
	dirs := new([]string)
	imgs := &fakeImages{}
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": recoveringDriver{imageDriver{&fake.Driver{}, dirs}}}, Images: imgs,
		Config: Config{Templates: []Template{{Name: "default"}}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	rep, err := sup.Recover(context.Background())
	if err != nil || len(rep.Reattached) != 1 {
		t.Fatalf("recover: %+v %v", rep, err)
	}
	if imgs.holds.Load() != 1 {
		t.Errorf("the reattached sandbox's image is held %d times, want 1", imgs.holds.Load())
	}
	if _, err := sup.Exec(context.Background(), alice, "sb-image", ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*dirs, []string{"/app"}) {
		t.Errorf("the exec ran in %q, want the image's /app", *dirs)
	}
	if err := sup.Kill(context.Background(), alice, "sb-image"); err != nil {
		t.Fatal(err)
	}
	if imgs.released.Load() != 1 {
		t.Errorf("released %d times after the sandbox ended, want 1", imgs.released.Load())
	}
}
