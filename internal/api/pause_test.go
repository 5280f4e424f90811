package api

import (
	"context"
	"net/http"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

func TestPauseOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{Pausable: true}, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.PauseSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != client.StatePaused || p.Paused == nil || p.Paused.StoredBytes == 0 || p.Paused.ExpiresAt.IsZero() {
		t.Fatalf("paused: %+v %+v", p, p.Paused)
	}
	if l, err := c.ListSandboxes(ctx, client.ListOptions{State: client.StatePaused}); err != nil || len(l) != 1 {
		t.Fatalf("list of paused sandboxes: %d, %v", len(l), err)
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}})
	apiError(t, err, http.StatusConflict, "paused")
	r, err := c.ResumeSandbox(ctx, sb.ID)
	if err != nil || r.State != client.StateRunning || r.Paused != nil {
		t.Fatalf("resumed: %+v %v", r, err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
}

func TestPauseUnsupportedOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PauseSandbox(ctx, sb.ID)
	apiError(t, err, http.StatusNotImplemented, "unsupported")
}
