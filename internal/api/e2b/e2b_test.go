package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestMain builds the agent for the native driver's tests, and fails the
// package's tests when they leave goroutines behind: every stream, watch,
// run and kernel start must be gone once it has ended.
func TestMain(m *testing.M) { agenttest.Main(leakChecked{m}) }

type leakChecked struct{ m *testing.M }

// forker is the native driver's one thread that forks agents, which lives
// as long as the process.
const forker = "github.com/airlock-sandbox/airlock/internal/driver/native.runForker"

func (l leakChecked) Run() int {
	code := l.m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(goleak.IgnoreAnyFunction(forker)); err != nil {
		fmt.Fprintf(os.Stderr, "the E2B tests leaked goroutines:\n%v\n", err)
		return 1
	}
	return 0
}

// env is the E2B handler in front of the API, over a supervisor with the
// fake driver, on 127.0.0.1.
type env struct {
	t          *testing.T
	url        string
	st         *store.Store
	sup        *supervisor.Supervisor
	h          *Handler
	key, other string
}

func newEnv(t *testing.T, tune func(*Options)) *env {
	t.Helper()
	return newEnvWith(t, &fake.Driver{}, supervisor.Config{Templates: []supervisor.Template{{Name: "default"}, {Name: "pooled", Pool: 1}}}, tune)
}

// newEnvWith is newEnv with a driver (named native) and templates of its
// own.
func newEnvWith(t *testing.T, drv sandbox.Driver, cfg supervisor.Config, tune func(*Options)) *env {
	t.Helper()
	return newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg}, tune)
}

// newEnvOpts is newEnv with the supervisor's options (its store is made
// here).
func newEnvOpts(t *testing.T, so supervisor.Options, tune func(*Options)) *env {
	t.Helper()
	st := so.Store // one the test made (its keys), or a new one
	if st == nil {
		var err error
		if st, err = store.Open(t.TempDir(), 0); err != nil {
			t.Fatal(err)
		}
		so.Store = st
	}
	sup, err := supervisor.New(so)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go sup.Run(ctx)
	srv, err := api.New(api.Options{Supervisor: sup, Store: st, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Supervisor: sup, Store: st, API: srv, Config: supervisor.E2BConfig{Templates: []string{"base=default", "pooled=pooled"}}, WatchInterval: 20 * time.Millisecond}
	if tune != nil {
		tune(&opts)
	}
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		_ = h.Close(context.Background())
		cancel()
		_ = sup.Close(context.Background())
		st.Close()
	})
	e := &env{t: t, url: hs.URL, st: st, sup: sup, h: h}
	e.key = e.newKey(store.FormatE2B)
	e.other = e.newKey(store.FormatE2B)
	return e
}

func (e *env) newKey(f store.SecretFormat) string {
	e.t.Helper()
	fast := store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 1000, ExecBurst: 1000, FilesPerSecond: 1000, FileBurst: 1000}
	_, sec, err := e.st.NewKeyFormat(nil, "t", store.RoleAgent, store.Quota{}, fast, time.Now(), f)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(sec)
}

// do sends a request and returns its status and body.
func (e *env) do(method, path string, hdr map[string]string, body io.Reader) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// e2bError asserts an answer is E2B's error with status.
func e2bError(t *testing.T, what string, status int, body []byte, got int) errorBody {
	t.Helper()
	var eb errorBody
	if got != status || json.Unmarshal(body, &eb) != nil || eb.Code != status || eb.Message == "" {
		t.Fatalf("%s: want %d and E2B's {code, message}, got %d %s", what, status, got, body)
	}
	return eb
}

// create makes a sandbox with the key and returns E2B's answer.
func (e *env) create(key, body string) sandboxJSON {
	e.t.Helper()
	st, b := e.do("POST", "/v2/sandboxes", map[string]string{"X-API-KEY": key}, strings.NewReader(body))
	if st != http.StatusCreated {
		e.t.Fatalf("create: %d %s", st, b)
	}
	var sb sandboxJSON
	if err := json.Unmarshal(b, &sb); err != nil {
		e.t.Fatal(err)
	}
	return sb
}

func (e *env) envd(sb sandboxJSON, tok string) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": envdPort, "X-Access-Token": tok, "Content-Type": "application/json"}
}

func TestControlAPI(t *testing.T) {
	e := newEnv(t, nil)
	key := map[string]string{"X-API-KEY": e.key}

	st, b := e.do("POST", "/v2/sandboxes", nil, strings.NewReader(`{}`))
	e2bError(t, "no key", 401, b, st)
	st, b = e.do("POST", "/v2/sandboxes", map[string]string{"X-API-KEY": "e2b_00"}, strings.NewReader(`{}`))
	e2bError(t, "a wrong key", 401, b, st)
	st, b = e.do("POST", "/sandboxes", key, strings.NewReader(`{"templateID":"nope"}`))
	if eb := e2bError(t, "an unknown template", 404, b, st); !strings.Contains(eb.Message, "template 'nope' not found") {
		t.Fatalf("unknown template: %q", eb.Message)
	}
	for _, bad := range []string{`{"templateID":`, `{"timeout":-1e30}`, `{"envVars":{"A=B":"c"}}`, `{"autoResume":{"enabled":true}}`, `{"autoPause":true,"autoPauseMemory":false}`, `{"mcp":{"x":{}}}`, `{"metadata":{"":"x"}}`, `{"allow_internet_access":true}`} {
		st, b = e.do("POST", "/v2/sandboxes", key, strings.NewReader(bad))
		if st < 400 || st >= 500 {
			t.Errorf("create %s: want a 4xx, got %d %s", bad, st, b)
		}
		e2bError(t, "create "+bad, st, b, st)
	}
	st, b = e.do("POST", "/v2/sandboxes", key, bytes.NewReader(bytes.Repeat([]byte(" "), 2<<20)))
	e2bError(t, "a 2 MiB body", 413, b, st)

	sb := e.create(e.key, `{"templateID":"base","timeout":120,"metadata":{"team":"a b"},"envVars":{"X":"1"}}`)
	if sb.EnvdVersion != EnvdVersion || sb.EnvdAccessToken == "" || sb.TrafficAccessToken == "" || sb.TrafficAccessToken == sb.EnvdAccessToken || sb.ClientID == "" || sb.TemplateID != "default" {
		t.Fatalf("create answered %+v", sb)
	}
	// An airlock key works too: in X-API-KEY (SDKs that do not check a
	// key's form) and as a bearer token.
	airlockKey := e.newKey(store.FormatAirlock)
	if mine := e.create(airlockKey, `{}`); mine.EnvdAccessToken == "" {
		t.Fatalf("a create with an airlock key: %+v", mine)
	}
	st, b = e.do("GET", "/sandboxes/"+sb.SandboxID, map[string]string{"Authorization": "Bearer " + airlockKey}, nil)
	e2bError(t, "another key (an airlock one) gets", 404, b, st)
	st, b = e.do("GET", "/sandboxes/"+sb.SandboxID, key, nil)
	var d sandboxDetail
	if st != 200 || json.Unmarshal(b, &d) != nil || d.EnvdAccessToken != sb.EnvdAccessToken || d.Metadata["team"] != "a b" || d.State != "running" {
		t.Fatalf("get: %d %s", st, b)
	}
	if left := time.Until(d.EndAt); left < 100*time.Second || left > 121*time.Second {
		t.Fatalf("get: ends in %s, not about 120 s", left)
	}
	// Another key's sandbox: not found, and untouched.
	for _, r := range []struct{ method, path string }{{"GET", "/sandboxes/" + sb.SandboxID}, {"DELETE", "/sandboxes/" + sb.SandboxID}, {"POST", "/v2/sandboxes/" + sb.SandboxID + "/connect"}, {"POST", "/sandboxes/" + sb.SandboxID + "/timeout"}} {
		st, b = e.do(r.method, r.path, map[string]string{"X-API-KEY": e.other}, strings.NewReader(`{"timeout":5}`))
		if eb := e2bError(t, "another key's "+r.method+" "+r.path, 404, b, st); strings.Contains(eb.Message, "another key") {
			t.Fatalf("the answer says the sandbox exists: %q", eb.Message)
		}
	}
	// List with metadata (encoded twice, as the SDK does) and paging.
	sb2 := e.create(e.key, `{"metadata":{"team":"a b"}}`)
	e.create(e.key, `{"metadata":{"team":"c"}}`)
	q := "metadata=" + urlQueryEscape("team="+urlQueryEscape("a b"))
	st, b = e.do("GET", "/v2/sandboxes?"+q+"&limit=1", key, nil)
	var page []listedSandbox
	if st != 200 || json.Unmarshal(b, &page) != nil || len(page) != 1 {
		t.Fatalf("list page 1: %d %s", st, b)
	}
	req, _ := http.NewRequest("GET", e.url+"/v2/sandboxes?"+q+"&limit=1", nil)
	req.Header.Set("X-API-KEY", e.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	next := res.Header.Get("X-Next-Token")
	if next == "" {
		t.Fatal("list page 1 has no X-Next-Token")
	}
	st, b = e.do("GET", "/v2/sandboxes?"+q+"&limit=1&nextToken="+next, key, nil)
	var page2 []listedSandbox
	if st != 200 || json.Unmarshal(b, &page2) != nil || len(page2) != 1 || page2[0].SandboxID == page[0].SandboxID {
		t.Fatalf("list page 2: %d %s", st, b)
	}
	got := map[string]bool{page[0].SandboxID: true, page2[0].SandboxID: true}
	if !got[sb.SandboxID] || !got[sb2.SandboxID] {
		t.Fatalf("list by metadata: %v, want %s and %s", got, sb.SandboxID, sb2.SandboxID)
	}
	st, b = e.do("GET", "/v2/sandboxes?nextToken=garbage", key, nil)
	e2bError(t, "a forged next token", 400, b, st)
	st, b = e.do("GET", "/v2/sandboxes?state=paused", key, nil)
	if st != 200 || string(bytes.TrimSpace(b)) != "[]" {
		t.Fatalf("list paused: %d %s", st, b)
	}
	// Timeout, metrics, unsupported verbs, unknown routes.
	if st, b = e.do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", key, strings.NewReader(`{"timeout":30}`)); st != 204 {
		t.Fatalf("set timeout: %d %s", st, b)
	}
	if st, b = e.do("GET", "/sandboxes/"+sb.SandboxID+"/metrics", key, nil); st != 200 || !bytes.Contains(b, []byte(`"memTotal"`)) {
		t.Fatalf("metrics: %d %s", st, b)
	}
	st, b = e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil)
	e2bError(t, "pause", 501, b, st)
	// updateNetwork: what airlock does not have is refused, as at create;
	// a sandbox made without network (the template has none) cannot gain it.
	st, b = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", key, strings.NewReader(`{"egressProxy":{"address":"p:1080"}}`))
	e2bError(t, "updateNetwork with an egress proxy", 400, b, st)
	st, b = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", key, strings.NewReader(`{"allow_internet_access":true}`))
	e2bError(t, "updateNetwork to the internet on a template without network", 403, b, st)
	st, b = e.do("PUT", "/sandboxes/sb-000000000000/network", key, strings.NewReader(`{}`))
	e2bError(t, "updateNetwork of an unknown sandbox", 404, b, st)
	if st, b = e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", key, strings.NewReader(`{"allow_internet_access":false}`)); st != 204 {
		t.Fatalf("updateNetwork to no network of a sandbox without network: %d %s", st, b)
	}
	st, b = e.do("GET", "/sandboxes/"+sb.SandboxID+"/nope", key, nil)
	e2bError(t, "an unknown route", 404, b, st)
	// Kill: once 204, then 404, and the sandbox is gone to every route.
	if st, _ = e.do("DELETE", "/sandboxes/"+sb.SandboxID, key, nil); st != 204 {
		t.Fatalf("kill: %d", st)
	}
	st, b = e.do("DELETE", "/sandboxes/"+sb.SandboxID, key, nil)
	e2bError(t, "kill again", 404, b, st)
	st, b = e.do("POST", "/sandboxes/"+sb.SandboxID+"/connect", key, nil)
	e2bError(t, "connect to a killed sandbox", 404, b, st)
	st, b = e.do("GET", "/health", e.envd(sb, sb.EnvdAccessToken), nil)
	e2bError(t, "envd of a killed sandbox", 502, b, st)
	// Everything else is airlock's own API.
	if st, b = e.do("GET", "/healthz", nil, nil); st != 200 || !bytes.Contains(b, []byte(`"status":"ok"`)) {
		t.Fatalf("/healthz through the E2B handler: %d %s", st, b)
	}
	if st, _ = e.do("GET", "/sandboxes", map[string]string{"X-API-KEY": e.key, "Host": "evil.example"}, nil); st != 200 {
		t.Fatalf("list: %d", st)
	}
}

func urlQueryEscape(s string) string {
	r := strings.NewReplacer("%", "%25", " ", "%20", "&", "%26", "=", "%3D", "+", "%2B")
	return r.Replace(s)
}

// TestHostCheck: the E2B routes refuse the Host names and Origins the API
// refuses (DNS rebinding, web pages).
func TestHostCheck(t *testing.T) {
	e := newEnv(t, nil)
	for _, hdr := range []map[string]string{{"Host": "evil.example"}, {"Origin": "https://evil.example"}} {
		req, _ := http.NewRequest("GET", e.url+"/v2/sandboxes", nil)
		req.Header.Set("X-API-KEY", e.key)
		if h, ok := hdr["Host"]; ok {
			req.Host = h
		}
		if o, ok := hdr["Origin"]; ok {
			req.Header.Set("Origin", o)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		e2bError(t, "a foreign Host or Origin", 403, b, res.StatusCode)
	}
}

func TestEnvdAuth(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(e.key, `{}`)
	health := func(hdr map[string]string) (int, []byte) { return e.do("GET", "/health", hdr, nil) }
	if st, b := health(e.envd(sb, sb.EnvdAccessToken)); st != 204 {
		t.Fatalf("health with the token: %d %s", st, b)
	}
	for _, tok := range []string{"", "x", sb.EnvdAccessToken + "0", strings.ToUpper(sb.EnvdAccessToken)} {
		st, b := health(e.envd(sb, tok))
		e2bError(t, "health with token "+tok, 401, b, st)
	}
	for _, id := range []string{"sb-000000000000", "../../etc", "", "sb-" + strings.Repeat("a", 100)} {
		hdr := e.envd(sb, sb.EnvdAccessToken)
		hdr["E2b-Sandbox-Id"] = id
		if id == "" {
			continue // no header: not a sandbox request
		}
		st, b := health(hdr)
		e2bError(t, "health of sandbox "+id, 401, b, st)
	}
	hdr := e.envd(sb, sb.EnvdAccessToken)
	hdr["E2b-Sandbox-Port"] = "8080"
	// Another port is the sandbox's server on it (ports.go), which the
	// fake driver cannot reach.
	if st, b := health(hdr); st != 502 || !strings.Contains(string(b), "cannot reach a port") {
		t.Fatalf("a port of a sandbox whose driver cannot reach it: %d %s", st, b)
	}
	// The traffic token opens the interpreter, not envd.
	hdr = e.envd(sb, "")
	hdr["E2b-Traffic-Access-Token"] = sb.TrafficAccessToken
	st, b := health(hdr)
	e2bError(t, "envd with only the traffic token", 401, b, st)
	hdr["E2b-Sandbox-Port"] = interpreterPort
	if st, b = e.do("GET", "/contexts", hdr, nil); st != 200 {
		t.Fatalf("the interpreter with the traffic token: %d %s", st, b)
	}
	// A pooled sandbox belongs to nobody yet, and has no token.
	var pooled string
	for deadline := time.Now().Add(5 * time.Second); pooled == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, id := range e.sup.LiveIDs() {
			if in, err := e.sup.Sandbox(context.Background(), id); err == nil && in.State == store.StatePooled {
				pooled = id
			}
		}
	}
	if pooled == "" {
		t.Fatal("the pool did not fill")
	}
	hdr = e.envd(sb, "")
	hdr["E2b-Sandbox-Id"] = pooled
	st, b = health(hdr)
	e2bError(t, "envd of a pooled sandbox", 401, b, st)
	// A sandbox made through airlock's own API has no token until an E2B
	// connect gives it one.
	c := api.KeyCaller(mustKey(t, e.st, e.key))
	info, err := e.sup.Create(context.Background(), c, supervisor.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hdr = e.envd(sandboxJSON{SandboxID: info.ID}, "")
	st, b = health(hdr)
	e2bError(t, "envd of a sandbox without a token", 401, b, st)
	st, b = e.do("POST", "/v2/sandboxes/"+info.ID+"/connect", map[string]string{"X-API-KEY": e.key}, strings.NewReader(`{"timeout":60}`))
	var conn sandboxJSON
	if st != 200 || json.Unmarshal(b, &conn) != nil || conn.EnvdAccessToken == "" {
		t.Fatalf("connect: %d %s", st, b)
	}
	if st, b = health(e.envd(conn, conn.EnvdAccessToken)); st != 204 {
		t.Fatalf("health after connect: %d %s", st, b)
	}
	// A second connect hands out the same token.
	_, b = e.do("POST", "/sandboxes/"+info.ID+"/connect", map[string]string{"X-API-KEY": e.key}, nil)
	var again sandboxJSON
	if json.Unmarshal(b, &again) != nil || again.EnvdAccessToken != conn.EnvdAccessToken {
		t.Fatalf("a second connect gave another token: %s", b)
	}
}

func mustKey(t *testing.T, st *store.Store, secret string) store.Key {
	t.Helper()
	k, err := st.KeyBySecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rpc calls a unary Connect procedure with a JSON body.
func (e *env) rpc(sb sandboxJSON, proc, body string) (int, []byte) {
	e.t.Helper()
	return e.do("POST", proc, e.envd(sb, sb.EnvdAccessToken), strings.NewReader(body))
}

// stream calls a server-streaming procedure and returns its messages and
// the end of the stream.
func (e *env) stream(sb sandboxJSON, proc, body string, hdr map[string]string) ([]json.RawMessage, json.RawMessage) {
	e.t.Helper()
	var req bytes.Buffer
	req.WriteByte(0)
	_ = binary.Write(&req, binary.BigEndian, uint32(len(body)))
	req.WriteString(body)
	h := e.envd(sb, sb.EnvdAccessToken)
	h["Content-Type"] = "application/connect+json"
	for k, v := range hdr {
		h[k] = v
	}
	st, b := e.do("POST", proc, h, &req)
	if st != 200 {
		e.t.Fatalf("%s: %d %s", proc, st, b)
	}
	var msgs []json.RawMessage
	for len(b) >= 5 {
		flag, n := b[0], binary.BigEndian.Uint32(b[1:5])
		msg := b[5 : 5+n]
		b = b[5+n:]
		if flag&2 != 0 {
			return msgs, msg
		}
		msgs = append(msgs, msg)
	}
	e.t.Fatalf("%s: the stream has no end", proc)
	return nil, nil
}

func TestProcessService(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(e.key, `{}`)
	msgs, end := e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"echo","args":["hi","there"]}}`, nil)
	if string(end) != "{}" || len(msgs) != 3 {
		t.Fatalf("Start echo: %s, end %s", msgs, end)
	}
	want := []string{`{"event":{"start":{"pid":1}}}`, `{"event":{"data":{"stdout":"aGkgdGhlcmUK"}}}`, `{"event":{"end":{"exited":true,"status":"exit status 0"}}}`}
	for i, w := range want {
		if string(msgs[i]) != w {
			t.Errorf("Start echo message %d: %s, want %s", i, msgs[i], w)
		}
	}
	_, _ = e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"exit","args":["3"]}}`, nil)
	msgs, _ = e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"exit","args":["3"]}}`, nil)
	if last := string(msgs[len(msgs)-1]); last != `{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}` {
		t.Errorf("Start exit 3 ends with %s", last)
	}
	// A sleeper: keepalives while it is silent; killed, it ends with -1.
	type result struct {
		msgs []json.RawMessage
		end  json.RawMessage
	}
	done := make(chan result, 1)
	go func() {
		m, en := e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"sleep"},"tag":"napper","stdin":true}`, map[string]string{"Keepalive-Ping-Interval": "1"})
		done <- result{m, en}
	}()
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never showed in List")
		}
		_, b := e.rpc(sb, "/process.Process/List", `{}`)
		var l struct {
			Processes []struct {
				PID int    `json:"pid"`
				Tag string `json:"tag"`
			} `json:"processes"`
		}
		_ = json.Unmarshal(b, &l)
		for _, p := range l.Processes {
			if p.Tag == "napper" {
				pid = p.PID
			}
		}
	}
	time.Sleep(1500 * time.Millisecond)
	if st, b := e.rpc(sb, "/process.Process/SendSignal", `{"process":{"tag":"napper"},"signal":"SIGNAL_SIGKILL"}`); st != 200 {
		t.Fatalf("SendSignal by tag: %d %s", st, b)
	}
	r := <-done
	var keepalives int
	for _, m := range r.msgs {
		if string(m) == `{"event":{"keepalive":{}}}` {
			keepalives++
		}
	}
	if keepalives == 0 || string(r.msgs[len(r.msgs)-1]) != `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}` {
		t.Errorf("the killed sleeper: %d keepalives, last %s", keepalives, r.msgs[len(r.msgs)-1])
	}
	// Ended, it is not found: kill says false, input fails.
	for _, c := range []struct{ proc, body string }{
		{"/process.Process/SendSignal", `{"process":{"pid":` + strconv.Itoa(pid) + `},"signal":9}`},
		{"/process.Process/SendInput", `{"process":{"pid":` + strconv.Itoa(pid) + `},"input":{"stdin":"eA=="}}`},
		{"/process.Process/CloseStdin", `{"process":{"pid":999}}`},
		{"/process.Process/Update", `{"process":{"pid":"999"},"pty":{"size":{"cols":80,"rows":24}}}`},
	} {
		st, b := e.rpc(sb, c.proc, c.body)
		if st != 404 || !bytes.Contains(b, []byte(`"code":"not_found"`)) {
			t.Errorf("%s %s: want not_found, got %d %s", c.proc, c.body, st, b)
		}
	}
	for _, c := range []struct{ proc, body string }{
		{"/process.Process/SendSignal", `{"process":{"pid":1},"signal":"SIGNAL_UNSPECIFIED"}`},
		{"/process.Process/SendSignal", `{"process":{},"signal":9}`},
		{"/process.Process/SendSignal", `{"signal":"SIGHUP"}`},
		{"/process.Process/List", `{"x":`},
	} {
		st, b := e.rpc(sb, c.proc, c.body)
		if st != 400 && st != 500 || !bytes.Contains(b, []byte(`"code":"invalid_argument"`)) {
			t.Errorf("%s %s: want invalid_argument, got %d %s", c.proc, c.body, st, b)
		}
	}
	// A terminal: its output is pty data; Update resizes it.
	msgs, _ = e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"stty"},"pty":{"size":{"cols":100,"rows":30}}}`, nil)
	if len(msgs) < 3 || string(msgs[1]) != `{"event":{"data":{"pty":"MzAgMTAwCg=="}}}` {
		t.Errorf("stty on a terminal: %s", msgs)
	}
	if st, b := e.rpc(sb, "/process.Process/Start", `{}`); st != 415 && st != 400 {
		t.Errorf("a unary call of a streaming procedure: %d %s", st, b)
	}
}

func TestFilesAndFilesystem(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxUpload = 1 << 10 })
	sb := e.create(e.key, `{}`)
	hdr := e.envd(sb, sb.EnvdAccessToken)
	post := func(path string, body io.Reader, ct string, extra map[string]string) (int, []byte) {
		h := map[string]string{}
		for k, v := range hdr {
			h[k] = v
		}
		h["Content-Type"] = ct
		for k, v := range extra {
			h[k] = v
		}
		return e.do("POST", "/files?path="+path, h, body)
	}
	st, b := post("a/b.txt", strings.NewReader("hello"), "application/octet-stream", nil)
	if st != 200 || string(bytes.TrimSpace(b)) != `[{"path":"/home/user/a/b.txt","name":"b.txt","type":"file"}]` {
		t.Fatalf("upload: %d %s", st, b)
	}
	st, b = e.do("GET", "/files?path=a/b.txt", hdr, nil)
	if st != 200 || string(b) != "hello" {
		t.Fatalf("download: %d %q", st, b)
	}
	// Multipart: each part's filename is its whole path.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for _, p := range []string{"/home/user/m/one.txt", "/home/user/m/two.txt"} {
		fw, _ := mw.CreateFormFile("file", p)
		_, _ = fw.Write([]byte("content of " + p))
	}
	_ = mw.Close()
	st, b = post("", &mp, mw.FormDataContentType(), nil)
	if st != 200 || !bytes.Contains(b, []byte(`"/home/user/m/two.txt"`)) {
		t.Fatalf("multipart upload: %d %s", st, b)
	}
	// Too large, plain and as a gzip bomb: 413, and nothing written.
	st, b = post("big.bin", bytes.NewReader(make([]byte, 4<<10)), "application/octet-stream", nil)
	e2bError(t, "an upload past the limit", 413, b, st)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(make([]byte, 1<<20))
	_ = zw.Close()
	st, b = post("bomb.bin", &gz, "application/octet-stream", map[string]string{"Content-Encoding": "gzip"})
	e2bError(t, "a gzip bomb", 413, b, st)
	st, b = post("x.bin", strings.NewReader("not gzip"), "application/octet-stream", map[string]string{"Content-Encoding": "gzip"})
	e2bError(t, "a body that is not gzip", 400, b, st)
	st, b = post("x.bin", strings.NewReader("x"), "text/plain", nil)
	e2bError(t, "a text/plain upload", 400, b, st)
	for _, p := range []string{"big.bin", "bomb.bin", "x.bin"} {
		if st, b := e.rpc(sb, "/filesystem.Filesystem/Stat", `{"path":"`+p+`"}`); st != 404 {
			t.Errorf("%s after a refused upload: %d %s", p, st, b)
		}
	}
	st, b = e.do("GET", "/files?path=../../etc/passwd", hdr, nil)
	e2bError(t, "a path with ..", 400, b, st)
	st, b = e.do("GET", "/files?path=nope.txt", hdr, nil)
	e2bError(t, "a missing file", 404, b, st)
	st, b = e.do("GET", "/files?path=a", hdr, nil)
	e2bError(t, "a directory", 400, b, st)

	// The Filesystem service.
	if st, b = e.rpc(sb, "/filesystem.Filesystem/Stat", `{"path":"a/b.txt"}`); st != 200 || !bytes.Contains(b, []byte(`"type":"FILE_TYPE_FILE"`)) || !bytes.Contains(b, []byte(`"size":"5"`)) || !bytes.Contains(b, []byte(`"path":"/home/user/a/b.txt"`)) {
		t.Fatalf("Stat: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/MakeDir", `{"path":"a"}`); st != 409 || !bytes.Contains(b, []byte("already_exists")) {
		t.Fatalf("MakeDir of a directory there is: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/Move", `{"source":"a/b.txt","destination":"c/d.txt"}`); st != 200 || !bytes.Contains(b, []byte(`"/home/user/c/d.txt"`)) {
		t.Fatalf("Move: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":2}`); st != 200 || !bytes.Contains(b, []byte(`"/home/user/c/d.txt"`)) || !bytes.Contains(b, []byte(`"/home/user/m/one.txt"`)) {
		t.Fatalf("ListDir depth 2: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/Remove", `{"path":"c"}`); st != 200 {
		t.Fatalf("Remove: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/Stat", `{"path":"c/d.txt"}`); st != 404 || !bytes.Contains(b, []byte("not_found")) {
		t.Fatalf("Stat of a removed file: %d %s", st, b)
	}
	// The polling watcher trio.
	st, b = e.rpc(sb, "/filesystem.Filesystem/CreateWatcher", `{"path":"m","recursive":true}`)
	var cw createWatcherResponse
	if st != 200 || json.Unmarshal(b, &cw) != nil || cw.WatcherID == "" {
		t.Fatalf("CreateWatcher: %d %s", st, b)
	}
	post("m/three.txt", strings.NewReader("3"), "application/octet-stream", nil)
	e.rpc(sb, "/filesystem.Filesystem/Remove", `{"path":"m/one.txt"}`)
	st, b = e.rpc(sb, "/filesystem.Filesystem/GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`)
	if st != 200 || string(b) != `{"events":[{"name":"one.txt","type":"EVENT_TYPE_REMOVE"},{"name":"three.txt","type":"EVENT_TYPE_CREATE"}]}` {
		t.Fatalf("GetWatcherEvents: %d %s", st, b)
	}
	// Another sandbox cannot use the watcher.
	sb2 := e.create(e.key, `{}`)
	if st, b = e.rpc(sb2, "/filesystem.Filesystem/GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`); st != 404 {
		t.Fatalf("another sandbox's watcher: %d %s", st, b)
	}
	if st, b = e.rpc(sb, "/filesystem.Filesystem/RemoveWatcher", `{"watcherId":"`+cw.WatcherID+`"}`); st != 200 {
		t.Fatalf("RemoveWatcher: %d %s", st, b)
	}
	if st, _ = e.rpc(sb, "/filesystem.Filesystem/GetWatcherEvents", `{"watcherId":"`+cw.WatcherID+`"}`); st != 404 {
		t.Fatalf("a removed watcher: %d", st)
	}
	// WatchDir streams: start first, then events; it ends with its
	// timeout.
	go func() {
		time.Sleep(200 * time.Millisecond)
		post("m/four.txt", strings.NewReader("4"), "application/octet-stream", nil)
	}()
	msgs, _ := e.stream(sb, "/filesystem.Filesystem/WatchDir", `{"path":"m"}`, map[string]string{"Connect-Timeout-Ms": "1500"})
	if len(msgs) < 2 || string(msgs[0]) != `{"start":{}}` || !strings.Contains(fmt.Sprintf("%s", msgs), `{"filesystem":{"name":"four.txt","type":"EVENT_TYPE_CREATE"}}`) {
		t.Fatalf("WatchDir: %s", msgs)
	}
}
