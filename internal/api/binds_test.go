package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestFourEyesKeyLineage: the key that asked cannot approve, nor can any
// key it made, directly or through keys those made (the security review's
// F8 had an operator mint a second operator key and approve its own
// request with it).
func TestFourEyesKeyLineage(t *testing.T) {
	e, _ := startPolicyEnv(t, askPolicy)
	ctx := context.Background()
	_, askerKey := e.secret(store.RoleOperator)
	asker, _ := client.New(e.url, askerKey)
	sb, err := asker.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := asker.Exec(ctx, sb.ID, client.ExecRequest{Code: "print('NEEDS-APPROVAL')", Language: "python"})
		done <- err
	}()
	id := waitPending(t, e, askerKey)["id"].(string)
	approve := func(key string) (int, string) {
		st, _, b := e.raw("POST", "/v1/approvals/"+id, key, strings.NewReader(`{"decision":"approve"}`), nil)
		return st, string(b)
	}
	if st, b := approve(askerKey); st != 403 {
		t.Fatalf("the asker approved its own request: %d %s", st, b)
	}
	mint := func(by string) string {
		st, _, b := e.raw("POST", "/v1/keys", by, strings.NewReader(`{"name":"sock","role":"operator"}`), nil)
		if st != 201 {
			t.Fatalf("mint a key: %d %s", st, b)
		}
		var k struct{ Secret string }
		_ = json.Unmarshal([]byte(b), &k)
		return k.Secret
	}
	child := mint(askerKey)
	grandchild := mint(child)
	for name, key := range map[string]string{"a key the asker made": child, "a key made by a key the asker made": grandchild} {
		if st, b := approve(key); st != 403 || !strings.Contains(b, "made") {
			t.Fatalf("%s approved the asker's request: %d %s", name, st, b)
		}
	}
	// Another operator's key may.
	_, opKey := e.secret(store.RoleOperator)
	if st, b := approve(opKey); st != 200 {
		t.Fatalf("an unrelated operator key: %d %s", st, b)
	}
	if err := <-done; err != nil {
		t.Fatalf("the approved exec: %v", err)
	}
}

// TestUIStateBelongsToServer: the approval page's sessions live in their
// server, so a server that is dropped is freed with them (they were kept
// in a package-level map keyed by the server, never deleted).
func TestUIStateBelongsToServer(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	_, sec, _ := e.st.NewKey("op", store.RoleOperator, store.Quota{}, store.RateLimits{}, time.Now())
	srv, err := New(Options{Supervisor: e.sup, Store: e.st, ListenAddr: "127.0.0.1:7070"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "http://127.0.0.1:7070/ui/login", strings.NewReader(`{"key":"`+string(sec)+`"}`))
	r.Header.Set("Origin", "http://127.0.0.1:7070")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	if w.Code != 200 {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	wp := weak.Make(srv)
	srv = nil
	for i := 0; i < 5 && wp.Value() != nil; i++ {
		runtime.GC()
	}
	if wp.Value() != nil {
		t.Fatal("a dropped API server is still reachable: its UI sessions are kept outside it")
	}
}

// TestApprovalPageShowsControls: an argv with bidi, zero-width and control
// characters is shown on the approvals page with each of them as a visible
// escape, as a JSON list, with a warning (the security review's F11 saw
// U+202E reorder what the operator read).
func TestApprovalPageShowsControls(t *testing.T) {
	requireChromium(t)
	e, _ := startPolicyEnv(t, `
[[rule]]
name = "needs-approval"
when = 'action == "exec" && argv.size() > 1 && argv[1] == "NEEDS-APPROVAL"'
decision = "ask"
`)
	_, agentKey := e.secret(store.RoleAgent)
	_, opKey := e.secret(store.RoleOperator)
	agent, _ := client.New(e.url, agentKey)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", "NEEDS-APPROVAL", "safe-looking \u202e)\"~ fr- mr\"(metsys.so\u200b\a"}})
	}()
	waitPending(t, e, opKey)
	cmd := exec.Command("node", "controls.mjs", e.url, opKey)
	cmd.Dir = "webtest"
	b, err := cmd.CombinedOutput()
	t.Logf("browser: %s", b)
	if err != nil {
		t.Fatalf("browser run failed: %v", err)
	}
}

// headerTransport adds headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPInFlight: a tool call over /mcp holds one in-flight slot of its
// key while it runs, not two (the request's and the call's: the request
// holds one only while its body is read), and is rate limited like the
// API.
func TestMCPInFlight(t *testing.T) {
	e := startEnv(t, &fake.Driver{}, envOptions{})
	_, sec, _ := e.st.NewKey("mcp", store.RoleAgent, store.Quota{}, store.RateLimits{MaxInFlight: 1, ExecsPerSecond: 0.1, ExecBurst: 1}, time.Now())
	ctx := context.Background()
	tr := &sdk.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: headerTransport{"Authorization": "Bearer " + string(sec)}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() (*sdk.CallToolResult, string) {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "echo hi"}})
		for i := 0; err != nil && strings.Contains(err.Error(), "Too Many Requests") && i < 50; i++ {
			// The client's notifications/initialized may still hold the
			// one slot.
			time.Sleep(20 * time.Millisecond)
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "echo hi"}})
		}
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text += tc.Text
			}
		}
		return res, text
	}
	if res, text := call(); res.IsError {
		t.Fatalf("a tool call with a cap of 1 in flight: %s", text)
	}
	if res, text := call(); !res.IsError || !strings.Contains(text, "retry after") {
		t.Fatalf("a second exec at 0.1/s: %v %s", res.IsError, text)
	}
}
