package e2b

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestPauseControlAPI: pause, list and get as paused, connect resuming,
// resume, as E2B's SDKs call them.
func TestPauseControlAPI(t *testing.T) {
	e := newEnvWith(t, &fake.Driver{Pausable: true}, supervisor.Config{StateDir: t.TempDir(), Templates: []supervisor.Template{{Name: "default"}}}, nil)
	key := map[string]string{"X-API-KEY": e.key}
	sb := e.create(e.key, `{"templateID":"base"}`)
	id := sb.SandboxID
	if st, b := e.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause: %d %s", st, b)
	}
	st, b := e.do("POST", "/sandboxes/"+id+"/pause", key, nil)
	e2bError(t, "a second pause", 409, b, st)
	list := func(q string) []listedSandbox {
		t.Helper()
		st, b := e.do("GET", "/v2/sandboxes"+q, key, nil)
		var l []listedSandbox
		if st != 200 || json.Unmarshal(b, &l) != nil {
			t.Fatalf("list%s: %d %s", q, st, b)
		}
		return l
	}
	if l := list("?state=paused"); len(l) != 1 || l[0].State != "paused" {
		t.Fatalf("paused list: %+v", l)
	}
	if l := list(""); len(l) != 0 {
		t.Fatalf("the default list (running) has %+v", l)
	}
	if l := list("?state=running,paused"); len(l) != 1 {
		t.Fatalf("running,paused list: %+v", l)
	}
	if st, b := e.do("GET", "/sandboxes/"+id, key, nil); st != 200 || !strings.Contains(string(b), `"state":"paused"`) {
		t.Fatalf("get of a paused sandbox: %d %s", st, b)
	}
	// Sandbox.connect resumes it: 201, then 200 for a running one.
	st, b = e.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{"timeout":60}`))
	var got sandboxJSON
	if st != 201 || json.Unmarshal(b, &got) != nil || got.SandboxID != id || got.EnvdAccessToken == "" {
		t.Fatalf("connect to a paused sandbox: %d %s", st, b)
	}
	if st, b := e.do("POST", "/v2/sandboxes/"+id+"/connect", key, strings.NewReader(`{}`)); st != 200 {
		t.Fatalf("connect to a running sandbox: %d %s", st, b)
	}
	st, b = e.do("POST", "/sandboxes/"+id+"/resume", key, strings.NewReader(`{}`))
	e2bError(t, "resume of a running sandbox", 409, b, st)
	if st, b := e.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause: %d %s", st, b)
	}
	if st, b := e.do("POST", "/sandboxes/"+id+"/resume", key, strings.NewReader(`{}`)); st != 201 {
		t.Fatalf("resume: %d %s", st, b)
	}
	if st, b := e.do("POST", "/sandboxes/"+id+"/pause", key, nil); st != 204 {
		t.Fatalf("pause: %d %s", st, b)
	}
	if st, _ := e.do("DELETE", "/sandboxes/"+id, key, nil); st != 204 {
		t.Fatalf("kill of a paused sandbox: %d", st)
	}
	st, b = e.do("GET", "/sandboxes/"+id, key, nil)
	e2bError(t, "a killed sandbox", 404, b, st)
}
