package e2b

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestForkRoute: POST /sandboxes/{id}/fork answers 201 with one
// SandboxForkResult per copy, each a running sandbox with an envd token of
// its own; bad counts are 400; a driver without live fork is 501.
func TestForkRoute(t *testing.T) {
	for _, can := range []bool{true, false} {
		e := newEnvWith(t, &fake.Driver{LiveForkable: can}, supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}, nil)
		key := map[string]string{"X-API-KEY": e.key}
		sb := e.create(e.key, `{"templateID":"base"}`)
		st, b := e.do("POST", "/sandboxes/"+sb.SandboxID+"/fork", key, strings.NewReader(`{"count":2,"timeout":60}`))
		if !can {
			if eb := e2bError(t, "fork without live fork", http.StatusNotImplemented, b, st); !strings.Contains(eb.Message, "native") {
				t.Errorf("the refusal does not name the driver: %q", eb.Message)
			}
			continue
		}
		var res []forkResult
		if st != http.StatusCreated || json.Unmarshal(b, &res) != nil || len(res) != 2 {
			t.Fatalf("fork: %d %s", st, b)
		}
		seen := map[string]bool{sb.EnvdAccessToken: true}
		for _, r := range res {
			f := r.Sandbox
			if f.SandboxID == "" || f.SandboxID == sb.SandboxID || f.EnvdAccessToken == "" || seen[f.EnvdAccessToken] {
				t.Errorf("a copy: %+v", f)
			}
			seen[f.EnvdAccessToken] = true
		}
		for _, bad := range []string{`{"count":0}`, `{"count":17}`, `{"timeout":1e30}`} {
			st, b = e.do("POST", "/sandboxes/"+sb.SandboxID+"/fork", key, strings.NewReader(bad))
			e2bError(t, "fork "+bad, http.StatusBadRequest, b, st)
		}
	}
}
