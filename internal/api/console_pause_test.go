package api

import (
	"context"
	"os/exec"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestConsolePaused: the console lists a paused sandbox as paused (among
// the live ones, and under its own filter) with its pause, pauses and
// resumes it from the session (the CSRF token needed), and shows it
// running again.
func TestConsolePaused(t *testing.T) {
	e := startEnv(t, &fake.Driver{Pausable: true}, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	_, opKey := e.secret(store.RoleOperator)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cookie, csrf := uiLogin(t, e, opKey)
	type list struct{ Sandboxes []ConsoleSandbox }
	stateOf := func(filter string) (string, *Paused) {
		t.Helper()
		st, _, b := e.ui("GET", "/ui/api/sandboxes?state="+filter, cookie, "", "")
		l := decodeAs[list](t, st, b)
		for _, s := range l.Sandboxes {
			if s.ID == sb.ID {
				return string(s.State), s.Paused
			}
		}
		return "", nil
	}
	if st, _, _ := e.ui("POST", "/ui/api/sandboxes/"+sb.ID+"/pause", cookie, "", ""); st != 403 {
		t.Fatalf("a pause without the CSRF token: %d", st)
	}
	if st, _, b := e.ui("POST", "/ui/api/sandboxes/"+sb.ID+"/pause", cookie, csrf, ""); st != 200 {
		t.Fatalf("pause from the console: %d %s", st, b)
	}
	for _, f := range []string{"live", "paused", ""} {
		if st, p := stateOf(f); st != "paused" || p == nil || p.StoredBytes == 0 {
			t.Fatalf("state=%s lists it %q, %+v", f, st, p)
		}
	}
	if st, _ := stateOf("running"); st != "" {
		t.Fatalf("state=running lists the paused sandbox (%s)", st)
	}
	st, _, b := e.ui("GET", "/ui/api/sandboxes/"+sb.ID, cookie, "", "")
	if d := decodeAs[consoleSandboxDetail](t, st, b); d.Sandbox.State != store.StatePaused || d.Sandbox.Paused == nil {
		t.Fatalf("its page: %+v", d.Sandbox)
	}
	if st, _, b := e.ui("POST", "/ui/api/sandboxes/"+sb.ID+"/resume", cookie, csrf, ""); st != 200 {
		t.Fatalf("resume from the console: %d %s", st, b)
	}
	if st, p := stateOf("live"); st != "running" || p != nil {
		t.Fatalf("after the resume it is listed %q, %+v", st, p)
	}
}

// TestConsolePausedInChromium: the page shows a paused sandbox as paused,
// with a Resume button and no Extend, and one click resumes it.
func TestConsolePausedInChromium(t *testing.T) {
	requireChromium(t)
	e := startEnv(t, &fake.Driver{Pausable: true}, envOptions{cfg: supervisor.Config{StateDir: t.TempDir()}})
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	_, opKey := e.secret(store.RoleOperator)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "paused.mjs", e.url, opKey, sb.ID)
	cmd.Dir = "webtest"
	out, err := cmd.CombinedOutput()
	t.Logf("browser: %s", out)
	if err != nil {
		t.Fatalf("browser run failed: %v", err)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != client.StateRunning {
		t.Fatalf("after the page's Resume: %+v %v", got, err)
	}
}
