package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestLiveFork: two clones of a running sandbox, each admitted, recorded
// and audited, with the source's files; the source runs on; the image is
// removed.
func TestLiveFork(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sup, _ := pauseFixture(t, dir, &fake.Driver{LiveForkable: true}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{Metadata: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"write", "/workspace/kept", "kept"}}); err != nil {
		t.Fatal(err)
	}
	res, err := sup.LiveFork(ctx, alice, LiveForkRequest{Sandbox: in.ID, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != in.ID || len(res.Sandboxes) != 2 || res.ImageBytes == 0 {
		t.Fatalf("live fork: %+v", res)
	}
	for _, c := range append([]Info{in}, res.Sandboxes...) {
		got, err := sup.Get(ctx, alice, c.ID)
		if err != nil || got.State != store.StateRunning || got.Metadata["app"] != "x" || got.Template != in.Template {
			t.Errorf("%s after the fork: %+v %v", c.ID, got, err)
		}
		files, done, err := sup.Files(ctx, alice, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		if err := files.ReadFile(ctx, "/workspace/kept", 0, 0, &b); err != nil || b.String() != "kept" {
			t.Errorf("%s's /workspace/kept: %q %v", c.ID, b.String(), err)
		}
		done()
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "forks")); len(ents) != 0 {
		t.Errorf("the image was left: %v", ents)
	}
	if _, err := sup.LiveFork(ctx, alice, LiveForkRequest{Sandbox: in.ID, Count: MaxLiveForks + 1}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("%d clones: %v", MaxLiveForks+1, err)
	}
	if _, err := sup.LiveFork(ctx, bob, LiveForkRequest{Sandbox: in.ID}); err == nil {
		t.Error("another key forked alice's sandbox")
	}
}

// TestLiveForkAdmission: a fork that the key's quota cannot hold is
// refused before the source is saved, and nothing is left of it; a clone
// that fails to start takes the others with it.
func TestLiveForkAdmission(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	drv := &fake.Driver{LiveForkable: true}
	sup, _ := pauseFixture(t, dir, drv, &clock{now: time.Now()})
	defer sup.Close(ctx)
	c := alice
	c.Quota = store.Quota{MaxSandboxes: 3}
	in, err := sup.Create(ctx, c, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.LiveFork(ctx, c, LiveForkRequest{Sandbox: in.ID, Count: 3}); !errors.Is(err, ErrQuota) {
		t.Fatalf("3 clones with room for 2: %v", err)
	}
	if l, _ := sup.List(ctx, c, Filter{}); len(l) != 1 {
		t.Fatalf("%d sandboxes after a refused fork", len(l))
	}
	drv.CloneFail = errors.New("no")
	if _, err := sup.LiveFork(ctx, c, LiveForkRequest{Sandbox: in.ID, Count: 2}); err == nil {
		t.Fatal("a fork whose clones fail succeeded")
	}
	if l, _ := sup.List(ctx, c, Filter{}); len(l) != 1 {
		t.Fatalf("%d live sandboxes after a failed fork", len(l))
	}
	if _, err := sup.Exec(ctx, c, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("the source after a failed fork: %v", err)
	}
}

// TestLiveForkUnsupported: a driver without live_fork is refused with its
// reason.
func TestLiveForkUnsupported(t *testing.T) {
	ctx := context.Background()
	sup, _ := pauseFixture(t, t.TempDir(), &fake.Driver{}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.LiveFork(ctx, alice, LiveForkRequest{Sandbox: in.ID})
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(ue.Why, "native") {
		t.Fatalf("live fork on a driver without it: %v", err)
	}
}
