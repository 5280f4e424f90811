package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestPauseDiskFull: a pause whose image's disk (STATE/paused, a full
// tmpfs here) has no room is refused as a capacity error that says so,
// and the sandbox runs on.
func TestPauseDiskFull(t *testing.T) {
	testcap.Require(t, "root")
	ctx := context.Background()
	dir := t.TempDir()
	paused := filepath.Join(dir, "paused")
	if err := os.MkdirAll(paused, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", paused, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(paused, unix.MNT_DETACH) })
	filler, err := os.OpenFile(filepath.Join(paused, "filler"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(make([]byte, 4096))
	}
	filler.Close()
	sup, _ := pauseFixture(t, dir, &fake.Driver{Pausable: true}, &clock{now: time.Now()})
	defer sup.Close(ctx)
	in, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.Pause(ctx, alice, in.ID)
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), "runs on") {
		t.Fatalf("a pause onto a full disk: %v", err)
	}
	t.Log(err)
	if got, _ := sup.Get(ctx, alice, in.ID); got.State != store.StateRunning || got.Paused != nil {
		t.Fatalf("after the pause onto a full disk: %s %+v", got.State, got.Paused)
	}
	if res, err := sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec after the pause onto a full disk: %+v %v", res, err)
	}
}
