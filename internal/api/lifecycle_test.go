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

// TestLifecycleOverAPI: on_timeout and auto_resume at create, in the
// answer; auto_resume without pause refused; an auto_resume sandbox that
// is paused runs an exec (resumed first).
func TestLifecycleOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{Pausable: true}, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	ctx := context.Background()
	_, err := c.CreateSandbox(ctx, client.CreateRequest{AutoResume: true})
	apiError(t, err, http.StatusBadRequest, "invalid")
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{OnTimeout: "pause", AutoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	if sb.OnTimeout != "pause" || !sb.AutoResume {
		t.Fatalf("create's answer: on_timeout %q auto_resume %v", sb.OnTimeout, sb.AutoResume)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec in a paused auto_resume sandbox: %v", err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StateRunning {
		t.Fatalf("after the exec: %+v %v", got, err)
	}
}
