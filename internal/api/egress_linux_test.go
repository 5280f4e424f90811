package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestEgressRoute creates a sandbox that asks for egress within its
// template's ceiling, fetches through the proxy and reads the summary.
func TestEgressRoute(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream")
	})}}
	srv.Start()
	defer srv.Close()
	addr := ln.Addr().String()
	e := nativeEnv(t, envOptions{cfg: supervisor.Config{Templates: []supervisor.Template{
		{Name: "default"},
		{Name: "net", Network: supervisor.TemplateNetwork{Mode: "egress", AllowAddresses: []string{addr}}},
	}}})
	_, secret, err := e.st.NewKey("egress", store.RoleAgent, store.Quota{MaxSandboxes: 8}, store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100, ExecsPerSecond: 100, ExecBurst: 100}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sec := string(secret)
	c, err := client.New(e.url, sec)
	if err != nil {
		t.Fatal(err)
	}
	create := func(body string) (int, map[string]any) {
		st, _, b := e.raw("POST", "/v1/sandboxes", sec, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return st, m
	}
	// More than the template allows is refused, not trimmed.
	if st, m := create(`{"template":"default","network":{"mode":"egress","allow_addresses":["` + addr + `"]}}`); st != 400 {
		t.Fatalf("egress beyond the default template: %d %v", st, m)
	}
	st, m := create(`{"template":"net","network":{"mode":"egress","allow_addresses":["` + addr + `"]}}`)
	if st != 201 && st != 200 {
		t.Fatalf("create: %d %v", st, m)
	}
	id, _ := m["id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", "curl -sS http://" + addr + "/ ; echo; curl -sS http://unlisted.invalid/"}, Env: map[string]string{"NO_PROXY": "", "no_proxy": ""}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(r.Stdout), "upstream\nairlock egress: GET unlisted.invalid:80 refused") {
		t.Fatalf("curl through the proxy: %q %q", r.Stdout, r.Stderr)
	}
	st, _, b := e.raw("GET", "/v1/sandboxes/"+id+"/egress", sec, nil, nil)
	var sum egress.Summary
	if err := json.Unmarshal(b, &sum); err != nil || st != 200 {
		t.Fatalf("GET egress: %d %s", st, b)
	}
	if sum.SandboxID != id || sum.Allowed != 1 || sum.Denied != 1 || sum.BytesReceived == 0 || len(sum.Hosts) != 2 {
		t.Fatalf("summary %+v", sum)
	}
	// A sandbox without egress has no summary.
	st, m = create(`{"template":"default"}`)
	if st != 201 && st != 200 {
		t.Fatalf("create: %d %v", st, m)
	}
	if st, _, b := e.raw("GET", "/v1/sandboxes/"+m["id"].(string)+"/egress", sec, nil, nil); st != 404 {
		t.Fatalf("GET egress of network none: %d %s", st, b)
	}
}
