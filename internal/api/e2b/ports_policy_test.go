package e2b

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestExposePolicyRefusal: a port the policy refuses to expose answers 403
// with the rule and its reason; another port of the same sandbox is not
// refused by it (the fake's closed port: 502).
func TestExposePolicyRefusal(t *testing.T) {
	pol, err := policy.New(policy.File{Rules: []policy.Rule{
		{Name: "no-debug-port", When: `action == "expose" && port == 9229`, Decision: policy.Deny, Reason: "the debugger's port is not exposed"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	drv := &fake.Driver{Ports: func(_ context.Context, port int) (net.Conn, error) {
		return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
	}}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg, Policy: pol}, nil)
	sb := e.create(e.key, `{}`)
	for port, want := range map[string]struct {
		status int
		body   string
	}{
		"9229": {403, "denied by policy (rule:no-debug-port): the debugger's port is not exposed"},
		"8080": {502, "no process listens on port 8080"},
	} {
		hdr := e.envd(sb, "")
		hdr["E2b-Sandbox-Port"] = port
		st, b := e.do("GET", "/", hdr, nil)
		if st != want.status || !strings.Contains(string(b), want.body) {
			t.Errorf("port %s: %d %s; want %d with %q", port, st, b, want.status, want.body)
		}
	}
}
