package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// testEnv is a real API server on 127.0.0.1 over a supervisor and a store.
type testEnv struct {
	t   testing.TB
	url string
	st  *store.Store
	sup *supervisor.Supervisor
	reg *prometheus.Registry
}

type envOptions struct {
	cfg supervisor.Config
	mem func() (int64, error)
	// snapshots gives the supervisor a snapshot store.
	snapshots bool
	// objects is the object store exports go to.
	objects *objstore.Client
	// pol is the daemon's policy; nil: the default.
	pol *policy.Policy
}

func startEnv(t testing.TB, drv sandbox.Driver, o envOptions) *testEnv {
	t.Helper()
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var snaps snapshot.Store
	if o.snapshots {
		if snaps, err = snapshot.OpenLocal(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Config: o.cfg,
		Metrics: supervisor.NewMetrics(reg), MemAvailable: o.mem, Snapshots: snaps, Objects: o.objects, Policy: o.pol,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go sup.Run(ctx)
	srv, err := New(Options{Supervisor: sup, Store: st, ListenAddr: "127.0.0.1:0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		_ = sup.Close(context.Background())
		st.Close()
	})
	return &testEnv{t: t, url: hs.URL, st: st, sup: sup, reg: reg}
}

// client makes a key with role, quota and rate limits, and a client that
// uses it.
func (e *testEnv) client(role store.Role, q store.Quota, r store.RateLimits) (*client.Client, store.Key) {
	e.t.Helper()
	k, sec, err := e.st.NewKey(e.t.Name(), role, q, r, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.url, string(sec))
	if err != nil {
		e.t.Fatal(err)
	}
	return c, k
}

func (e *testEnv) agent() *client.Client {
	c, _ := e.client(store.RoleAgent, store.Quota{MaxSandboxes: 64}, store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 10000, ExecBurst: 10000, FilesPerSecond: 10000, FileBurst: 10000, MaxInFlight: 1000})
	return c
}

// apiError asserts err is a *client.Error with status and code.
func apiError(t *testing.T, err error, status int, code string) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want API error %d %s, got %v", status, code, err)
	}
	if ce.Status != status || ce.Code != code {
		t.Fatalf("want API error %d %s, got %d %s: %s", status, code, ce.Status, ce.Code, ce.Message)
	}
	return ce
}

// raw sends a request by hand and returns the status, headers and body.
func (e *testEnv) raw(method, path, key string, body io.Reader, hdr map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func TestAuth(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	ctx := context.Background()
	alice, aliceKey := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	bob, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	op, _ := e.client(store.RoleOperator, store.Quota{}, store.RateLimits{})

	anon, _ := client.New(e.url, "")
	_, err := anon.ListSandboxes(ctx, client.ListOptions{})
	apiError(t, err, 401, "unauthorized")
	wrong, _ := client.New(e.url, "airlock_not-a-key")
	_, err = wrong.CreateSandbox(ctx, client.CreateRequest{})
	apiError(t, err, 401, "unauthorized")
	if st, _, _ := e.raw("GET", "/v1/sandboxes", "", nil, map[string]string{"Authorization": "Basic eDp5"}); st != 401 {
		t.Errorf("basic auth: %d", st)
	}

	sb, err := alice.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Owner != aliceKey.ID || sb.State != client.StateRunning {
		t.Fatalf("created %+v", sb)
	}
	_, err = bob.GetSandbox(ctx, sb.ID)
	apiError(t, err, 403, "forbidden")
	apiError(t, bob.DeleteSandbox(ctx, sb.ID), 403, "forbidden")
	_, err = bob.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", "x"}})
	apiError(t, err, 403, "forbidden")
	_, err = bob.SetTimeout(ctx, sb.ID, time.Minute)
	apiError(t, err, 403, "forbidden")
	if l, err := bob.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(l) != 0 {
		t.Fatalf("bob lists %v, %v", l, err)
	}
	if _, err := op.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("an operator cannot see a sandbox: %v", err)
	}
	_, err = alice.GetSandbox(ctx, "sb-doesnotexist")
	apiError(t, err, 404, "not_found")

	// Keys: operators only.
	_, err = alice.CreateKey(ctx, client.CreateKeyRequest{Name: "x"})
	apiError(t, err, 403, "forbidden")
	_, err = alice.ListKeys(ctx)
	apiError(t, err, 403, "forbidden")
	k, err := op.CreateKey(ctx, client.CreateKeyRequest{Name: "new", Role: "agent", Quota: client.Quota{MaxSandboxes: 3}})
	if err != nil || k.Secret == "" || k.Quota.MaxSandboxes != 3 {
		t.Fatalf("operator creates key: %+v, %v", k, err)
	}
	keys, err := op.ListKeys(ctx)
	if err != nil || len(keys) != 4 || slices.ContainsFunc(keys, func(k client.Key) bool { return k.Secret != "" }) {
		t.Fatalf("list keys: %+v, %v", keys, err)
	}
	newc, _ := client.New(e.url, k.Secret)
	if _, err := newc.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatalf("new key does not work: %v", err)
	}
	if err := op.DeleteKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	_, err = newc.ListSandboxes(ctx, client.ListOptions{})
	apiError(t, err, 401, "unauthorized")
	_, err = op.CreateKey(ctx, client.CreateKeyRequest{Role: "root"})
	apiError(t, err, 400, "invalid")
}

func TestHostAndOrigin(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	_, sec, _ := e.st.NewKey("k", store.RoleAgent, store.Quota{}, store.RateLimits{}, time.Now())
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"listen address", nil, 200, ""},
		{"localhost", map[string]string{"Host": "localhost:7070"}, 200, ""},
		{"ipv6 loopback", map[string]string{"Host": "[::1]:7070"}, 200, ""},
		{"rebinding name", map[string]string{"Host": "attacker.example:7070"}, 403, "host_not_allowed"},
		{"other IP", map[string]string{"Host": "10.1.2.3"}, 403, "host_not_allowed"},
		{"localhost lookalike", map[string]string{"Host": "localhost.attacker.example"}, 403, "host_not_allowed"},
		{"web page origin", map[string]string{"Origin": "https://attacker.example"}, 403, "origin_not_allowed"},
		{"null origin", map[string]string{"Origin": "null"}, 403, "origin_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := e.raw("GET", "/v1/sandboxes", string(sec), nil, tc.hdr)
			if st != tc.status {
				t.Fatalf("status %d, want %d: %s", st, tc.status, body)
			}
			if tc.code != "" && !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
				t.Fatalf("body %s, want code %s", body, tc.code)
			}
		})
	}
	// Even the public routes check the Host.
	if st, _, _ := e.raw("GET", "/healthz", "", nil, map[string]string{"Host": "attacker.example"}); st != 403 {
		t.Errorf("healthz under a foreign Host: %d", st)
	}
}

func TestConfiguredHostsAndOrigins(t *testing.T) {
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sup, _ := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}})
	defer sup.Close(context.Background())
	srv, err := New(Options{Supervisor: sup, Store: st, ListenAddr: "0.0.0.0:7070", AllowedHosts: []string{"airlock.internal"}, AllowedOrigins: []string{"https://console.example"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, origin string
		ok           bool
	}{
		{"airlock.internal:7070", "", true},
		{"192.168.1.10:7070", "", true}, // listening on every address: any IP
		{"evil.example", "", false},
		{"airlock.internal", "https://console.example", true},
		{"airlock.internal", "https://console.example.evil", false},
	} {
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if (w.Code == 200) != tc.ok {
			t.Errorf("host %q origin %q: %d", tc.host, tc.origin, w.Code)
		}
	}
}

func TestQuotaOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	ctx := context.Background()
	c, _ := e.client(store.RoleAgent, store.Quota{MaxSandboxes: 2, MaxMemoryBytes: 1 << 30}, store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100})
	for i := 0; i < 2; i++ {
		if _, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 64 << 20}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 64 << 20}})
	ce := apiError(t, err, 429, "quota_exceeded")
	if !strings.Contains(ce.Message, "2 live sandboxes") {
		t.Errorf("message %q", ce.Message)
	}
	c2, _ := e.client(store.RoleAgent, store.Quota{MaxMemoryBytes: 100 << 20}, store.RateLimits{})
	_, err = c2.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 128 << 20}})
	apiError(t, err, 429, "quota_exceeded")
}

func TestRateLimits(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	ctx := context.Background()
	c, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{CreatesPerSecond: 0.5, CreateBurst: 1, ExecsPerSecond: 1, ExecBurst: 2})
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, client.CreateRequest{})
	ce := apiError(t, err, 429, "rate_limited")
	if ce.RetryAfter < time.Second || ce.RetryAfter > 2*time.Second {
		t.Errorf("Retry-After %v, want 1-2 s at 0.5 creates/s", ce.RetryAfter)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", "hi"}}); err != nil {
			t.Fatalf("exec %d within the burst: %v", i, err)
		}
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", "hi"}})
	ce = apiError(t, err, 429, "rate_limited")
	if ce.RetryAfter < time.Second {
		t.Errorf("Retry-After %v", ce.RetryAfter)
	}
	// Another key has its own budget.
	c2, _ := e.client(store.RoleAgent, store.Quota{}, store.RateLimits{})
	if _, err := c2.CreateSandbox(ctx, client.CreateRequest{}); err != nil {
		t.Fatalf("other key limited: %v", err)
	}
	// The raw header is whole seconds.
	_, sec, _ := e.st.NewKey("r", store.RoleAgent, store.Quota{}, store.RateLimits{CreatesPerSecond: 0.1, CreateBurst: 1}, time.Now())
	e.raw("POST", "/v1/sandboxes", string(sec), strings.NewReader("{}"), nil)
	st, h, _ := e.raw("POST", "/v1/sandboxes", string(sec), strings.NewReader("{}"), nil)
	if st != 429 || h.Get("Retry-After") != "10" {
		t.Errorf("status %d Retry-After %q, want 429 and 10", st, h.Get("Retry-After"))
	}
}

func TestAdmissionOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{
		cfg: supervisor.Config{MemoryReserve: 256 << 20, Templates: []supervisor.Template{{Name: "default", Memory: 2 << 30}}},
		mem: func() (int64, error) { return 1 << 30, nil },
	})
	c := e.agent()
	_, err := c.CreateSandbox(context.Background(), client.CreateRequest{Limits: client.Limits{MemoryBytes: 1 << 30}})
	ce := apiError(t, err, 503, "insufficient_capacity")
	if !strings.Contains(ce.Message, "768 MiB is free") {
		t.Errorf("message %q does not say what is free", ce.Message)
	}
	// 448 MiB of memory with 32 MiB /workspace, 16 MiB /tmp and /dev/shm
	// can pin 512 MiB.
	if _, err := c.CreateSandbox(context.Background(), client.CreateRequest{Limits: client.Limits{MemoryBytes: 448 << 20, DiskBytes: 32 << 20, TmpBytes: 16 << 20}}); err != nil {
		t.Fatal(err)
	}
}

func TestPoolOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{cfg: supervisor.Config{Templates: []supervisor.Template{{Name: "default", Pool: 2}}}})
	ctx := context.Background()
	c := e.agent()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := c.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Pools) == 1 && h.Pools[0].Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled: %+v", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil || !sb.FromPool {
		t.Fatalf("claim: %+v, %v", sb, err)
	}
	_, _, body := e.raw("GET", "/metrics", "", nil, nil)
	for _, want := range []string{`airlock_pool_hits_total{template="default"} 1`, `airlock_pool_claim_seconds_count 1`, `airlock_sandboxes_live{driver="native"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestErrors(t *testing.T) {
	drv := &fake.Driver{}
	e := startEnv(t, drv, envOptions{})
	_, sec, _ := e.st.NewKey("k", store.RoleAgent, store.Quota{}, store.RateLimits{}, time.Now())
	key := string(sec)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown field", "POST", "/v1/sandboxes", `{"templat":"x"}`, 400, "invalid"},
		{"not json", "POST", "/v1/sandboxes", `{`, 400, "invalid"},
		{"empty body", "POST", "/v1/sandboxes", ``, 400, "invalid"},
		{"two objects", "POST", "/v1/sandboxes", `{}{}`, 400, "invalid"},
		{"negative ttl", "POST", "/v1/sandboxes", `{"ttl_seconds":-1}`, 400, "invalid"},
		{"bad template name", "POST", "/v1/sandboxes", `{"template":"../x"}`, 400, "invalid"},
		{"unknown template", "POST", "/v1/sandboxes", `{"template":"nope"}`, 404, "not_found"},
		{"bad state filter", "GET", "/v1/sandboxes?state=zombie", ``, 400, "invalid"},
		{"bad id", "GET", "/v1/sandboxes/..%2f..%2fetc", ``, 404, "not_found"},
		{"no route", "GET", "/v1/nothing", ``, 404, "not_found"},
		{"wrong method", "PATCH", "/v1/sandboxes", ``, 405, "method_not_allowed"},
		{"exec without command", "POST", "/v1/sandboxes/sb-x/exec", `{}`, 400, "invalid"},
		{"exec bad stdin", "POST", "/v1/sandboxes/sb-x/exec", `{"argv":["x"],"stdin":"!!"}`, 400, "invalid"},
		{"exec bad env", "POST", "/v1/sandboxes/sb-x/exec", `{"argv":["x"],"env":{"A=B":"c"}}`, 400, "invalid"},
		{"path with dotdot", "GET", "/v1/sandboxes/sb-x/files?path=/workspace/../../etc/passwd", ``, 400, "path_outside"},
		{"empty path", "GET", "/v1/sandboxes/sb-x/files/stat", ``, 400, "invalid"},
		{"bad signal", "POST", "/v1/sandboxes/sb-x/processes/e1/signal", `{"signal":"SIGFOO"}`, 400, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, h, body := e.raw(tc.method, tc.path, key, strings.NewReader(tc.body), nil)
			var eb errorBody
			if err := json.Unmarshal(body, &eb); err != nil || h.Get("Content-Type") != "application/json" {
				t.Fatalf("not a JSON error: %s (%v)", body, err)
			}
			if st != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" {
				t.Fatalf("got %d %s %q, want %d %s", st, eb.Error.Code, eb.Error.Message, tc.status, tc.code)
			}
		})
	}
	t.Run("body too large", func(t *testing.T) {
		big := `{"template":"` + strings.Repeat("a", maxJSONBody) + `"}`
		st, _, body := e.raw("POST", "/v1/sandboxes", key, strings.NewReader(big), nil)
		if st != 413 || !strings.Contains(string(body), "too_large") {
			t.Fatalf("%d %s", st, body)
		}
	})
	t.Run("internal errors name no host path", func(t *testing.T) {
		drv.Fail = errors.New("mount /var/lib/airlock/secret-dir/rootfs: device busy")
		defer func() { drv.Fail = nil }()
		st, _, body := e.raw("POST", "/v1/sandboxes", key, strings.NewReader(`{}`), nil)
		if st != 500 || strings.Contains(string(body), "/var/lib") || !strings.Contains(string(body), `"internal"`) {
			t.Fatalf("%d %s", st, body)
		}
	})
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	registered := map[string]bool{}
	for _, rt := range routes {
		k := rt.method + " " + rt.path
		registered[k] = true
		if !documented[k] {
			t.Errorf("route %s is not in openapi.json", k)
		}
	}
	for k := range documented {
		if !registered[k] {
			t.Errorf("openapi.json documents %s, which is not registered", k)
		}
	}
	// Every $ref resolves.
	var whole map[string]any
	_ = json.Unmarshal(openapiDoc, &whole)
	comps := whole["components"].(map[string]any)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				parts := strings.Split(strings.TrimPrefix(r, "#/components/"), "/")
				if sec, ok := comps[parts[0]].(map[string]any); !ok || sec[parts[1]] == nil {
					t.Errorf("dangling $ref %s", r)
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(whole)

	e := startEnv(t, &fake.Driver{}, envOptions{})
	st, _, body := e.raw("GET", "/v1/openapi.json", "", nil, nil)
	if st != 200 || !bytes.Equal(body, openapiDoc) {
		t.Fatalf("GET /v1/openapi.json: %d", st)
	}
}

// TestReaperOverAPI: the daemon's own reaper loop destroys a sandbox past
// its TTL and another past its idle timeout, and GET says why.
func TestReaperOverAPI(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{cfg: supervisor.Config{
		ReapInterval: supervisor.Duration(50 * time.Millisecond),
		Templates:    []supervisor.Template{{Name: "default", TTL: supervisor.Duration(time.Hour), IdleTimeout: supervisor.Duration(time.Hour)}},
	}})
	ctx := context.Background()
	c := e.agent()
	ttl, err := c.CreateSandbox(ctx, client.CreateRequest{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.CreateSandbox(ctx, client.CreateRequest{IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := c.CreateSandbox(ctx, client.CreateRequest{IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// Using a sandbox keeps it from idling.
		if _, err := c.Exec(ctx, kept.ID, client.ExecRequest{Argv: []string{"echo"}}); err != nil {
			t.Fatalf("the sandbox in use was reaped: %v", err)
		}
		a, _ := c.GetSandbox(ctx, ttl.ID)
		b, _ := c.GetSandbox(ctx, idle.ID)
		if a.State == client.StateDestroyed && b.State == client.StateDestroyed {
			if a.EndReason != "ttl" || b.EndReason != "idle" {
				t.Fatalf("end reasons %q and %q, want ttl and idle", a.EndReason, b.EndReason)
			}
			if got, _ := c.GetSandbox(ctx, kept.ID); got.State != client.StateRunning {
				t.Fatalf("sandbox in use: %+v", got)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the reaper did not destroy the expired and the idle sandbox within 5 s")
}

// TestInFlightBeforeBody: a key's in-flight cap is taken before a body is
// read, so a key cannot make the daemon hold more bodies than its cap;
// the refusal is a 429 with Retry-After.
func TestInFlightBeforeBody(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	_, sec, _ := e.st.NewKey("slow", store.RoleAgent, store.Quota{}, store.RateLimits{MaxInFlight: 1}, time.Now())
	key := string(sec)
	u := strings.TrimPrefix(e.url, "http://")
	conn, err := net.Dial("tcp", u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A body that never comes whole holds the key's one slot.
	fmt.Fprintf(conn, "POST /v1/sandboxes/sb-000000000000/exec HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 1000000\r\n\r\n{\"argv\":[\"echo\"", u, key)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, h, body := e.raw("POST", "/v1/sandboxes/sb-000000000000/exec", key, strings.NewReader(`{"argv":["echo"]}`), nil)
		if st == 429 {
			if h.Get("Retry-After") != "1" || !strings.Contains(string(body), "at most 1 at once") {
				t.Fatalf("refusal: %s %s", h.Get("Retry-After"), body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second call while the first holds the key's one slot: %d %s", st, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn.Close()
	for {
		st, _, body := e.raw("POST", "/v1/sandboxes/sb-000000000000/exec", key, strings.NewReader(`{"argv":["echo"]}`), nil)
		if st == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not released: %d %s", st, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
