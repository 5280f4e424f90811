package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
)

// upstream serves "upstream" on a loopback port and returns its address.
func upstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream")
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyBindsEgress: the policy's [network] bounds every sandbox's
// network, and rules on action "egress" decide every request through the
// proxy, in the daemon and in `airlock run` (the security review's F4 found
// both ignored: the proxy decided from the template alone).
func TestPolicyBindsEgress(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	allowed, other := upstream(t), upstream(t)
	pol := writeFile(t, dir, "policy.toml", fmt.Sprintf(`
[network]
allow = [%q]

[[rule]]
name = "no-egress"
when = 'action == "egress"'
decision = "deny"
reason = "no egress from this daemon"
`, allowed))
	cfg := writeFile(t, dir, "config.toml", fmt.Sprintf(`
[[template]]
name = "net"
[template.network]
mode = "egress"
allow_addresses = [%q]

[[template]]
name = "wide"
[template.network]
mode = "egress"
allow_addresses = [%q, %q]
`, allowed, allowed, other))
	state := filepath.Join(dir, "state")
	key := newKey(t, state, "agent")
	d := startDaemon(t, state, "--config", cfg, "--policy", pol)
	c, err := client.New(d.url, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if h, err := c.Health(ctx); err != nil || h.Audit != "ok" {
		t.Fatalf("health: %+v %v", h, err)
	}
	if resp, err := http.Get(d.url + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "\nairlock_audit_ok 1\n") {
			t.Fatalf("metrics lack airlock_audit_ok 1")
		}
	}

	// A template whose network is wider than the policy's is refused.
	_, err = c.CreateSandbox(ctx, client.CreateRequest{Template: "wide"})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "denied" || !strings.Contains(ce.Message, other) {
		t.Fatalf("create with a network wider than the policy's: %v", err)
	}
	// Within it, each request is still decided by the rules.
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: "net"})
	if err != nil {
		t.Fatal(err)
	}
	// (NO_PROXY names 127.0.0.1 in a sandbox: empty it to reach a
	// loopback upstream through the proxy.)
	noProxy := map[string]string{"NO_PROXY": "", "no_proxy": ""}
	r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"curl", "-sS", "http://" + allowed + "/"}, Env: noProxy})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(r.Stdout), "upstream") || !strings.Contains(string(r.Stdout), "no-egress") {
		t.Fatalf("a request a policy rule denies: %q %q", r.Stdout, r.Stderr)
	}

	// airlock run --policy: the same.
	o := airlockRun(t, runArgs("--policy", pol, "--allow-address", other, "--", "true"))
	if o.code != cli.ExitDenied || !strings.Contains(o.stderr, "network") {
		t.Fatalf("run with a network wider than the policy's: %d %q", o.code, o.stderr)
	}
	o = airlockRun(t, runArgs("--policy", pol, "--allow-address", allowed, "--env", "NO_PROXY=", "--env", "no_proxy=", "--", "curl", "-sS", "http://"+allowed+"/"))
	if strings.Contains(o.stdout, "upstream") || !strings.Contains(o.stdout, "no-egress") {
		t.Fatalf("run: a request a policy rule denies: %d %q %q", o.code, o.stdout, o.stderr)
	}
}

// TestMCPStdioPolicy: `airlock mcp --policy` binds the embedded
// supervisor as the daemon's policy binds the API: a rule denies, and
// "ask" denies at once, since nobody can approve there.
func TestMCPStdioPolicy(t *testing.T) {
	requireMCP(t)
	dir := t.TempDir()
	pol := writeFile(t, dir, "policy.toml", `
[[rule]]
name = "no-shell"
when = 'action == "exec" && language == "bash"'
decision = "deny"
reason = "no shell code here"

[[rule]]
name = "python-asks"
when = 'action == "exec" && language == "python"'
decision = "ask"
`)
	cmd := exec.Command(filepath.Join(binDir, "airlock"), "mcp", "--state-dir", filepath.Join(dir, "state"), "--policy", pol)
	cmd.Env = mcpEnv("", "")
	cs := goClient(t, &sdk.CommandTransport{Command: cmd})
	defer cs.Close()
	call := func(args map[string]any) (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text += tc.Text
			}
		}
		return res.IsError, text
	}
	if isErr, text := call(map[string]any{"code": "echo hi", "language": "bash"}); !isErr || !strings.Contains(text, "no shell code here") {
		t.Fatalf("bash code under a rule that denies it: %v %q", isErr, text)
	}
	start := time.Now()
	if isErr, text := call(map[string]any{"code": "print(1)"}); !isErr || !strings.Contains(text, "nobody can approve") || time.Since(start) > 10*time.Second {
		t.Fatalf("python code under a rule that asks: %v %q after %v", isErr, text, time.Since(start))
	}
}
