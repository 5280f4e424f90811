package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api/webtest"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

const askPolicy = `
[[rule]]
name = "python-asks"
when = 'action == "exec" && language == "python"'
decision = "ask"
reason = "python code needs a person"

[approval]
timeout = "20s"
`

// startPolicyEnv is startEnv with a policy and an audit log.
func startPolicyEnv(t *testing.T, policyText string) (*testEnv, string) {
	t.Helper()
	return startPolicyEnvWith(t, policyText, &fake.Driver{})
}

// startPolicyEnvWith is startPolicyEnv over drv (as "native").
func startPolicyEnvWith(t *testing.T, policyText string, drv sandbox.Driver) (*testEnv, string) {
	t.Helper()
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pf, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(pf)
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	logPath := filepath.Join(dir, "audit.log")
	al, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv},
		Metrics: supervisor.NewMetrics(reg), Policy: pol, Audit: al,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Supervisor: sup, Store: st, ListenAddr: "127.0.0.1:0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		_ = sup.Close(context.Background())
		al.Close()
		st.Close()
	})
	return &testEnv{t: t, url: hs.URL, st: st, sup: sup, reg: reg}, logPath
}

func (e *testEnv) secret(role store.Role) (store.Key, string) {
	k, sec, err := e.st.NewKey(e.t.Name()+string(role), role, store.Quota{MaxSandboxes: 8}, store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100, ExecsPerSecond: 100, ExecBurst: 100}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return k, string(sec)
}

// waitPending polls GET /v1/approvals with an operator key until one is
// pending.
func waitPending(t *testing.T, e *testEnv, opKey string) map[string]any {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(10 * time.Millisecond) {
		st, _, body := e.raw("GET", "/v1/approvals", opKey, nil, nil)
		if st != 200 {
			t.Fatalf("GET /v1/approvals: %d %s", st, body)
		}
		var l struct{ Approvals []map[string]any }
		json.Unmarshal(body, &l)
		for _, a := range l.Approvals {
			if a["state"] == "pending" {
				return a
			}
		}
	}
	t.Fatal("no approval became pending")
	return nil
}

func TestApprovalsAPI(t *testing.T) {
	e, logPath := startPolicyEnv(t, askPolicy)
	ctx := context.Background()
	_, agentKey := e.secret(store.RoleAgent)
	op, opKey := e.secret(store.RoleOperator)
	agent, _ := client.New(e.url, agentKey)
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A built-in check denies, with the rule and reason in the error.
	_, err = agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"rm", "-rf", "/"}})
	if ce := apiError(t, err, http.StatusForbidden, "denied"); !strings.Contains(ce.Message, "check:destructive_delete") {
		t.Fatalf("denial message %q lacks the rule", ce.Message)
	}

	type res struct {
		out string
		err error
	}
	run := func() chan res {
		ch := make(chan res, 1)
		go func() {
			r, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Code: "print('hi')", Language: "python"})
			if err != nil {
				ch <- res{err: err}
				return
			}
			ch <- res{out: string(r.Stdout)}
		}()
		return ch
	}
	ch := run()
	a := waitPending(t, e, opKey)
	id := a["id"].(string)
	if a["rule"] != "rule:python-asks" || a["sandbox"] != sb.ID || a["request"].(map[string]any)["code"] != "print('hi')" {
		t.Fatalf("approval %v", a)
	}
	body := func(s string) *strings.Reader { return strings.NewReader(s) }
	if st, _, b := e.raw("GET", "/v1/approvals", agentKey, nil, nil); st != 403 {
		t.Fatalf("agent listed approvals: %d %s", st, b)
	}
	if st, _, b := e.raw("POST", "/v1/approvals/"+id, agentKey, body(`{"decision":"approve"}`), nil); st != 403 {
		t.Fatalf("agent approved: %d %s", st, b)
	}
	if st, _, b := e.raw("POST", "/v1/approvals/"+id, opKey, body(`{"decision":"maybe"}`), nil); st != 400 {
		t.Fatalf("bad decision: %d %s", st, b)
	}
	if st, _, b := e.raw("POST", "/v1/approvals/"+id, opKey, body(`{"decision":"approve","reason":"fine"}`), nil); st != 200 || !strings.Contains(string(b), `"state":"approved"`) || !strings.Contains(string(b), op.ID) {
		t.Fatalf("approve: %d %s", st, b)
	}
	if r := <-ch; r.err != nil || !strings.Contains(r.out, "print('hi')") {
		t.Fatalf("approved exec: %+v", r)
	}
	if st, _, _ := e.raw("POST", "/v1/approvals/"+id, opKey, body(`{"decision":"deny"}`), nil); st != 404 {
		t.Fatalf("deciding twice: %d", st)
	}
	ch = run()
	id = waitPending(t, e, opKey)["id"].(string)
	e.raw("POST", "/v1/approvals/"+id, opKey, body(`{"decision":"deny","reason":"no python today"}`), nil)
	r := <-ch
	if ce := apiError(t, r.err, http.StatusForbidden, "denied"); !strings.Contains(ce.Message, "no python today") {
		t.Fatalf("denied message %q", ce.Message)
	}
	// The audit log has it all, and the audit route serves it.
	st, _, b := e.raw("GET", "/v1/audit?n=1000", opKey, nil, nil)
	if st != 200 {
		t.Fatalf("GET /v1/audit: %d %s", st, b)
	}
	for _, want := range []string{`"kind":"create"`, `"rule":"check:destructive_delete"`, `"kind":"approval"`, `approved by ` + op.ID + `: fine`, `no python today`, `"kind":"exec"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("audit lacks %s", want)
		}
	}
	if st, _, _ := e.raw("GET", "/v1/audit", agentKey, nil, nil); st != 403 {
		t.Fatalf("agent read the audit log: %d", st)
	}
	f, _ := os.Open(logPath)
	defer f.Close()
	if rep, err := audit.Verify(f, audit.VerifyOptions{}); err != nil || rep.Torn || len(rep.Problems) != 0 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestApprovalPageProtections(t *testing.T) {
	e, _ := startPolicyEnv(t, askPolicy)
	_, agentKey := e.secret(store.RoleAgent)
	_, opKey := e.secret(store.RoleOperator)
	same := map[string]string{"Origin": e.url, "Content-Type": "application/json"}
	st, h, b := e.raw("GET", "/ui/", "", nil, nil)
	if st != 200 || !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") || h.Get("X-Frame-Options") != "DENY" || !bytes.Contains(b, []byte("Operator login")) {
		t.Fatalf("GET /ui/: %d %v", st, h)
	}
	if bytes.Contains(b, []byte("<script>")) || bytes.Contains(b, []byte(" on")) && bytes.Contains(b, []byte("onclick")) {
		t.Fatal("the page has inline script")
	}
	login := func(key string, hdr map[string]string) (int, http.Header, []byte) {
		return e.raw("POST", "/ui/login", "", strings.NewReader(`{"key":"`+key+`"}`), hdr)
	}
	if st, _, _ := login(opKey, map[string]string{"Content-Type": "application/json"}); st != 403 {
		t.Fatalf("login without Origin: %d", st)
	}
	if st, _, _ := login(opKey, map[string]string{"Origin": "http://evil.example"}); st != 403 {
		t.Fatalf("login from another origin: %d", st)
	}
	if st, _, _ := login(opKey, map[string]string{"Origin": e.url, "Host": "evil.example"}); st != 403 {
		t.Fatalf("login with a foreign Host: %d", st)
	}
	if st, _, _ := login(agentKey, same); st != 403 {
		t.Fatalf("login with an agent key: %d", st)
	}
	if st, _, _ := login("nope", same); st != 401 {
		t.Fatalf("login with a wrong key: %d", st)
	}
	st, h, b = login(opKey, same)
	var sess struct{ CSRF string }
	json.Unmarshal(b, &sess)
	cookie := h.Get("Set-Cookie")
	if st != 200 || sess.CSRF == "" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") {
		t.Fatalf("login: %d %s %s", st, b, cookie)
	}
	ck := strings.Split(cookie, ";")[0]
	if st, _, b := e.raw("GET", "/ui/api/approvals", "", nil, map[string]string{"Cookie": ck}); st != 200 || !strings.Contains(string(b), `"approvals":[]`) {
		t.Fatalf("list with session: %d %s", st, b)
	}
	if st, _, _ := e.raw("GET", "/ui/api/approvals", "", nil, nil); st != 401 {
		t.Fatalf("list without session: %d", st)
	}
	post := func(hdr map[string]string) int {
		hdr["Cookie"] = ck
		st, _, _ := e.raw("POST", "/ui/api/approvals/ap-x", "", strings.NewReader(`{"decision":"approve"}`), hdr)
		return st
	}
	if st := post(map[string]string{"Origin": e.url}); st != 403 {
		t.Fatalf("POST without CSRF token: %d", st)
	}
	if st := post(map[string]string{"Origin": e.url, "X-CSRF-Token": "wrong"}); st != 403 {
		t.Fatalf("POST with a wrong CSRF token: %d", st)
	}
	if st := post(map[string]string{"Origin": "http://evil.example", "X-CSRF-Token": sess.CSRF}); st != 403 {
		t.Fatalf("POST from another origin: %d", st)
	}
	if st := post(map[string]string{"Origin": e.url, "X-CSRF-Token": sess.CSRF}); st != 404 {
		t.Fatalf("POST with token and origin: %d (want 404: no such approval)", st)
	}
}

// TestApprovalPageInChromium loads the page in headless Chromium (driven
// by playwright-core from internal/api/webtest), logs in, approves a
// pending exec with one click, and sees the exec complete.
func TestApprovalPageInChromium(t *testing.T) {
	requireChromium(t)
	e, _ := startPolicyEnv(t, askPolicy)
	_, agentKey := e.secret(store.RoleAgent)
	_, opKey := e.secret(store.RoleOperator)
	agent, _ := client.New(e.url, agentKey)
	ctx := context.Background()
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	code := `print("<img id=pwned src=x onerror=alert(1)>")`
	done := make(chan error, 1)
	var out string
	go func() {
		r, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Code: code, Language: "python"})
		if err == nil {
			out = string(r.Stdout)
		}
		done <- err
	}()
	waitPending(t, e, opKey)
	// Chromium refuses 127.0.0.1 pages nothing special; the URL is the
	// server's own, so the Origin check passes.
	cmd := exec.Command("node", "approve.mjs", e.url, opKey)
	cmd.Dir = "webtest"
	b, err := cmd.CombinedOutput()
	t.Logf("browser: %s", b)
	if err != nil {
		t.Fatalf("browser run failed: %v", err)
	}
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out, "<img id=pwned") {
			t.Fatalf("exec after approval in the browser: %v %q", err, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exec did not complete after the approval")
	}
}

// requireChromium needs a working headless Chromium, Node and
// playwright-core in webtest (see webtest.Require).
func requireChromium(t *testing.T) { webtest.Require(t) }
