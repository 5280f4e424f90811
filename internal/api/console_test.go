package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// uiLogin logs in to the console with key and returns the session's
// cookie and CSRF token.
func uiLogin(t *testing.T, e *testEnv, key string) (cookie, csrf string) {
	t.Helper()
	st, h, b := e.raw("POST", "/ui/login", "", strings.NewReader(`{"key":"`+key+`"}`), map[string]string{"Origin": e.url, "Content-Type": "application/json"})
	var sess struct{ CSRF string }
	if err := json.Unmarshal(b, &sess); err != nil || st != 200 {
		t.Fatalf("login: %d %s", st, b)
	}
	return strings.Split(h.Get("Set-Cookie"), ";")[0], sess.CSRF
}

// ui sends a request of the console's session.
func (e *testEnv) ui(method, path, cookie, csrf, body string) (int, http.Header, []byte) {
	e.t.Helper()
	hdr := map[string]string{"Cookie": cookie}
	if method != "GET" {
		hdr["Origin"] = e.url
		hdr["Content-Type"] = "application/json"
		if csrf != "" {
			hdr["X-CSRF-Token"] = csrf
		}
	}
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	if rd == nil {
		return e.raw(method, path, "", nil, hdr)
	}
	return e.raw(method, path, "", rd, hdr)
}

func decodeAs[T any](t *testing.T, st int, b []byte) T {
	t.Helper()
	var v T
	if st != 200 {
		t.Fatalf("status %d: %s", st, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// TestConsoleRoutes drives the console's JSON routes as its page does,
// over the fake driver: lists and filters, the exec count, kill and extend
// (with and without the session's CSRF token), keys with what they hold,
// a download, and what a session whose key was revoked gets.
func TestConsoleRoutes(t *testing.T) {
	e, logPath := startPolicyEnv(t, askPolicy)
	ctx := context.Background()
	newKey := func(name string, role store.Role) (store.Key, string) {
		k, sec, err := e.st.NewKey(name, role, store.Quota{MaxSandboxes: 8}, store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100, ExecsPerSecond: 100, ExecBurst: 100}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return k, string(sec)
	}
	op, opKey := newKey("ops", store.RoleOperator)
	a, aKey := newKey("agent a", store.RoleAgent)
	b, bKey := newKey("agent b", store.RoleAgent)
	ca, _ := client.New(e.url, aKey)
	cb, _ := client.New(e.url, bKey)
	mk := func(c *client.Client) string {
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	sb1, sb2, sb3, sb4 := mk(ca), mk(ca), mk(cb), mk(ca)
	if err := ca.DeleteSandbox(ctx, sb4); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ca.Exec(ctx, sb1, client.ExecRequest{Argv: []string{"echo", "hi"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ca.Exec(ctx, sb1, client.ExecRequest{Argv: []string{"rm", "-rf", "/"}}); err == nil {
		t.Fatal("rm -rf / was not denied")
	}
	if err := ca.WriteFile(ctx, sb1, "/workspace/r\u00e9sum\u00e9 \"1\".txt", strings.NewReader("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	cookie, csrf := uiLogin(t, e, opKey)

	type list struct {
		Sandboxes []ConsoleSandbox
		Keys      []struct{ ID, Name string }
		Drivers   []string
	}
	ids := func(q string) []string {
		t.Helper()
		st, _, body := e.ui("GET", "/ui/api/sandboxes"+q, cookie, "", "")
		l := decodeAs[list](t, st, body)
		var out []string
		for _, s := range l.Sandboxes {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"", sorted(sb1, sb2, sb3, sb4)},
		{"?state=live", sorted(sb1, sb2, sb3)},
		{"?state=destroyed", []string{sb4}},
		{"?key=" + b.ID, []string{sb3}},
		{"?key=" + a.ID + "&state=live", sorted(sb1, sb2)},
		{"?driver=native&state=running", sorted(sb1, sb2, sb3)},
		{"?driver=gvisor", nil},
	} {
		if got := ids(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("GET /ui/api/sandboxes%s: %v, want %v", tc.q, got, tc.want)
		}
	}
	if st, _, body := e.ui("GET", "/ui/api/sandboxes?state=gone", cookie, "", ""); st != 400 {
		t.Errorf("a bad state: %d %s", st, body)
	}
	st, _, body := e.ui("GET", "/ui/api/sandboxes?key="+a.ID, cookie, "", "")
	l := decodeAs[list](t, st, body)
	if !slices.Contains(l.Drivers, "native") || !slices.ContainsFunc(l.Keys, func(k struct{ ID, Name string }) bool { return k.ID == b.ID && k.Name == "agent b" }) {
		t.Errorf("filters offered: %+v %+v", l.Drivers, l.Keys)
	}
	for _, s := range l.Sandboxes {
		switch {
		case s.ID == sb1 && s.ExecCount != 2:
			t.Errorf("%s ran %d execs (a denied one does not count), want 2", s.ID, s.ExecCount)
		case s.State == "running" && (s.Usage != nil || !strings.Contains(s.UsageError, "cannot read")):
			t.Errorf("the fake driver's usage: %+v %q", s.Usage, s.UsageError)
		}
	}
	st, _, body = e.ui("GET", "/ui/api/sandboxes/"+sb1, cookie, "", "")
	if d := decodeAs[consoleSandboxDetail](t, st, body); d.Sandbox.ID != sb1 || d.KeyName != "agent a" || d.Sandbox.ExecCount != 2 {
		t.Errorf("detail: %s", body)
	}
	// The API's usage route: the fake driver cannot tell.
	if st, _, body := e.raw("GET", "/v1/sandboxes/"+sb1+"/usage", aKey, nil, nil); st != 501 || !strings.Contains(string(body), `"unsupported"`) {
		t.Errorf("usage on the fake driver: %d %s", st, body)
	}

	// Kill and extend need the session's CSRF token.
	if st, _, _ := e.ui("POST", "/ui/api/sandboxes/"+sb2+"/kill", cookie, "", ""); st != 403 {
		t.Errorf("kill without a CSRF token: %d", st)
	}
	if st, _, body := e.ui("POST", "/ui/api/sandboxes/"+sb2+"/kill", cookie, csrf, ""); st != 204 {
		t.Errorf("kill: %d %s", st, body)
	}
	if sb, err := ca.GetSandbox(ctx, sb2); err != nil || sb.State != "destroyed" {
		t.Errorf("after the kill: %+v %v", sb, err)
	}
	if st, _, body := e.ui("POST", "/ui/api/sandboxes/"+sb1+"/timeout", cookie, "", `{"ttl_seconds":3600}`); st != 403 {
		t.Errorf("extend without a CSRF token: %d %s", st, body)
	}
	st, _, body = e.ui("POST", "/ui/api/sandboxes/"+sb1+"/timeout", cookie, csrf, `{"ttl_seconds":3600}`)
	if sb := decodeAs[Sandbox](t, st, body); time.Until(sb.ExpiresAt) < 59*time.Minute {
		t.Errorf("extend: %s", body)
	}
	if st, _, body := e.ui("POST", "/ui/api/sandboxes/"+sb1+"/timeout", cookie, csrf, `{"ttl_seconds":9999999}`); st != 400 {
		t.Errorf("extend past max_ttl: %d %s", st, body)
	}

	// A download is an attachment, never rendered.
	st, h, body := e.ui("GET", "/ui/api/sandboxes/"+sb1+"/files?path=/workspace/r%C3%A9sum%C3%A9%20%221%22.txt", cookie, "", "")
	if st != 200 || string(body) != "payload" || h.Get("Content-Disposition") != `attachment; filename="r_sum___1_.txt"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%221%22.txt` ||
		!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download: %d %v %q", st, h, body)
	}

	// Keys, with what each holds.
	type keyList struct{ Keys []ConsoleKey }
	st, _, body = e.ui("GET", "/ui/api/keys", cookie, "", "")
	for _, k := range decodeAs[keyList](t, st, body).Keys {
		want := map[string]int{a.ID: 1, b.ID: 1, op.ID: 0}[k.ID]
		if k.LiveSandboxes != want || (want > 0) != (k.MemoryBytes > 0) || k.Quota.MaxSandboxes != 8 {
			t.Errorf("key %s (%s): %d live, %d bytes", k.ID, k.Name, k.LiveSandboxes, k.MemoryBytes)
		}
	}
	if st, _, _ := e.ui("POST", "/ui/api/keys", cookie, "", `{"name":"x"}`); st != 403 {
		t.Errorf("make a key without a CSRF token: %d", st)
	}
	st, _, body = e.ui("POST", "/ui/api/keys", cookie, csrf, `{"name":"made on the page","role":"operator"}`)
	if st != 201 {
		t.Fatalf("make a key: %d %s", st, body)
	}
	var made Key
	json.Unmarshal(body, &made)
	if made.CreatedBy != op.ID || !strings.HasPrefix(made.Secret, "airlock_") {
		t.Errorf("the key made: %s", body)
	}
	// The made key logs in; revoked, its session ends.
	cookie2, _ := uiLogin(t, e, made.Secret)
	if st, _, body := e.ui("POST", "/ui/api/keys/"+made.ID+"/revoke", cookie, csrf, ""); st != 204 {
		t.Errorf("revoke: %d %s", st, body)
	}
	if st, _, _ := e.ui("GET", "/ui/api/sandboxes", cookie2, "", ""); st != 401 {
		t.Errorf("a session of a revoked key: %d", st)
	}
	if st, _, _ := e.ui("POST", "/ui/api/keys/"+made.ID+"/revoke", cookie, csrf, ""); st != 404 {
		t.Errorf("revoke twice: %d", st)
	}

	// What is not a route, and no session.
	if st, h, body := e.ui("GET", "/ui/api/nothing", cookie, "", ""); st != 404 || h.Get("Content-Type") != "application/json" {
		t.Errorf("an unknown route: %d %s", st, body)
	}
	if st, _, _ := e.raw("GET", "/ui/api/sandboxes", "", nil, nil); st != 401 {
		t.Errorf("no session: %d", st)
	}
	for path, want := range map[string]int{"/ui/core.js": 200, "/ui/app.css": 200, "/ui/nothing.js": 404, "/ui/ui.go": 401} {
		if st, h, _ := e.raw("GET", path, "", nil, nil); st != want || (want == 200 && !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'")) {
			t.Errorf("GET %s: %d %v", path, st, h)
		}
	}

	// The operator's kill is in the audit log, with who did it.
	f, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f), `"sandbox":"`+sb2+`","reason":"deleted: deleted by operator key `+op.ID+`"`) {
		t.Errorf("the audit log does not name the operator who killed %s", sb2)
	}
}

// TestAuditRoutes reads the audit log through GET /v1/audit's filters and
// pages, and checks GET /v1/audit/verify before and after an edit.
func TestAuditRoutes(t *testing.T) {
	e, logPath := startPolicyEnv(t, askPolicy)
	ctx := context.Background()
	_, agentKey := e.secret(store.RoleAgent)
	_, opKey := e.secret(store.RoleOperator)
	ca, _ := client.New(e.url, agentKey)
	var sbs []string
	for range 3 {
		sb, err := ca.CreateSandbox(ctx, client.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb.ID)
		for i := range 4 {
			if _, err := ca.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", fmt.Sprint(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	type event struct {
		Seq     int
		Kind    string
		Sandbox string
		Time    time.Time
	}
	type page struct {
		Events []event
		Next   string
	}
	get := func(q string) page {
		t.Helper()
		st, _, body := e.raw("GET", "/v1/audit"+q, opKey, nil, nil)
		return decodeAs[page](t, st, body)
	}
	p := get("?sandbox=" + sbs[1] + "&kind=exec")
	if len(p.Events) != 4 || p.Next != "" {
		t.Fatalf("one sandbox's execs: %+v", p)
	}
	for i, ev := range p.Events {
		if ev.Kind != "exec" || ev.Sandbox != sbs[1] || (i > 0 && ev.Seq <= p.Events[i-1].Seq) {
			t.Fatalf("event %d: %+v (want exec of %s, oldest first)", i, ev, sbs[1])
		}
	}
	if p := get("?kind=create,exec&sandbox=" + sbs[0]); len(p.Events) != 5 {
		t.Errorf("two kinds: %d events", len(p.Events))
	}
	if p := get("?kind=create&kind=destroy"); len(p.Events) != 3 {
		t.Errorf("repeated kinds: %d events", len(p.Events))
	}
	if p := get("?until=2000-01-01T00:00:00Z"); len(p.Events) != 0 {
		t.Errorf("before the log began: %d events", len(p.Events))
	}
	if p := get("?since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(p.Events) != 0 || p.Next != "" {
		t.Errorf("after now: %+v", p)
	}
	// Paging three at a time reads every line once, newest page first.
	all := get("?n=1000").Events
	var paged []event
	for q := "?n=3"; ; {
		p := get(q)
		if len(p.Events) > 3 {
			t.Fatalf("a page of 3 has %d", len(p.Events))
		}
		paged = append(slices.Clone(p.Events), paged...)
		if p.Next == "" {
			break
		}
		q = "?n=3&before=" + p.Next
	}
	if len(paged) != len(all) || len(all) < 30 {
		t.Fatalf("paged %d events, the log has %d", len(paged), len(all))
	}
	for i := range all {
		if paged[i].Seq != all[i].Seq || all[i].Seq != i+1 {
			t.Fatalf("line %d: paged %d, whole %d", i+1, paged[i].Seq, all[i].Seq)
		}
	}
	for _, q := range []string{"?kind=nope", "?since=yesterday", "?n=0", "?n=1001", "?before=7", "?before=x", "?before=99999999999"} {
		if st, _, body := e.raw("GET", "/v1/audit"+q, opKey, nil, nil); st != 400 {
			t.Errorf("GET /v1/audit%s: %d %s", q, st, body)
		}
	}

	// Verification: agents may not; intact, then edited.
	if st, _, _ := e.raw("GET", "/v1/audit/verify", agentKey, nil, nil); st != 403 {
		t.Errorf("an agent verified the log: %d", st)
	}
	st, _, body := e.raw("GET", "/v1/audit/verify", opKey, nil, nil)
	if v := decodeAs[AuditVerification](t, st, body); !v.OK || v.Lines < 30 || v.Checkpoints < 1 || len(v.Problems) != 0 {
		t.Fatalf("the intact log: %s", body)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	i := strings.Index(lines[9], `"echo"`)
	if i < 0 {
		i = strings.Index(lines[9], `"kind"`)
	}
	off := len(strings.Join(lines[:9], "")) + i + 1
	f, err := os.OpenFile(logPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), int64(off))
	f.Close()
	time.Sleep(verifyReuse + 100*time.Millisecond)
	st, _, body = e.raw("GET", "/v1/audit/verify", opKey, nil, nil)
	if v := decodeAs[AuditVerification](t, st, body); v.OK || v.ProblemCount != 1 || v.Problems[0].Line != 10 {
		t.Fatalf("the log edited at line 10: %s", body)
	}
}

func TestAttachment(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"a.txt", `attachment; filename="a.txt"; filename*=UTF-8''a.txt`},
		{`x"; y=z`, `attachment; filename="x___y_z"; filename*=UTF-8''x%22%3B%20y=z`},
		{"\u202etxt.exe", `attachment; filename="_txt.exe"; filename*=UTF-8''%E2%80%AEtxt.exe`},
		{"..", `attachment; filename="file"; filename*=UTF-8''..`},
		{"a\r\nSet-Cookie: x", `attachment; filename="a__Set-Cookie__x"; filename*=UTF-8''a%0D%0ASet-Cookie:%20x`},
	} {
		if got := attachment(tc.name); got != tc.want {
			t.Errorf("attachment(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
}
