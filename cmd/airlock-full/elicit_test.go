package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/mcp/npmtest"
)

// elicitPolicy asks a person before any command that says "-me".
const elicitPolicy = `
[[rule]]
name = "ask-me"
when = 'action == "exec" && argv.exists(a, a.contains("-me"))'
decision = "ask"
reason = "the test asks a person"

[approval]
timeout = "60s"
elicit = true
`

// elicitResult is what elicit.mjs prints.
type elicitResult struct {
	Asked []struct {
		Message    string   `json:"message"`
		Properties []string `json:"properties"`
	} `json:"asked"`
	Approved, Denied, Declined, Plain struct {
		IsError bool   `json:"isError"`
		Stdout  string `json:"stdout"`
		Text    string `json:"text"`
	}
}

// TestMCPElicitation: an ask verdict on a tool call of an MCP client that
// declares elicitation asks the person in the client (the official
// TypeScript SDK here), over stdio (`airlock mcp`, where nobody else could
// decide) and over HTTP (the daemon, where the policy allows it); the
// answer decides the call, and on the daemon it is audited as an approval
// by mcp-elicitation.
func TestMCPElicitation(t *testing.T) {
	requireMCP(t)
	dir := npmtest.Install(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte(elicitPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, r elicitResult) {
		t.Helper()
		if len(r.Asked) != 3 {
			t.Fatalf("the client was asked %d times, want 3 (approve, deny, decline; not the plain command): %+v", len(r.Asked), r.Asked)
		}
		if m := r.Asked[0]; !strings.Contains(m.Message, "rule:ask-me") || !strings.Contains(m.Message, "the test asks a person") || !strings.Contains(m.Message, `"echo approve-me"`) || strings.Join(m.Properties, ",") != "approve,reason" {
			t.Errorf("the form: %+v", m)
		}
		if r.Approved.IsError || r.Approved.Stdout != "approve-me\n" {
			t.Errorf("approved in the client, the command: %+v", r.Approved)
		}
		if !r.Denied.IsError || !strings.Contains(r.Denied.Text, "denied") || !strings.Contains(r.Denied.Text, "not this one") {
			t.Errorf("denied in the client, the command: %+v", r.Denied)
		}
		if !r.Declined.IsError || !strings.Contains(r.Declined.Text, "denied") {
			t.Errorf("declined in the client, the command: %+v", r.Declined)
		}
		if r.Plain.IsError || r.Plain.Stdout != "no-question\n" {
			t.Errorf("a command nobody is asked about: %+v", r.Plain)
		}
	}
	t.Run("stdio", func(t *testing.T) {
		check(t, runElicit(t, dir, mcpEnv("", ""), "stdio", filepath.Join(binDir, "airlock"), "mcp", "--state-dir", t.TempDir(), "--policy", pol))
	})
	t.Run("http", func(t *testing.T) {
		sdir := t.TempDir()
		key := newKey(t, sdir, "agent")
		d := startDaemon(t, sdir, "--policy", pol)
		check(t, runElicit(t, dir, append(os.Environ(), client.EnvKey+"="+key), "http", d.url+"/mcp"))
		b, err := os.ReadFile(filepath.Join(sdir, "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		var approvals []string
		for _, line := range strings.Split(string(b), "\n") {
			var ev struct {
				Kind, Decision, Reason string
			}
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Kind == "approval" {
				approvals = append(approvals, ev.Decision+": "+ev.Reason)
			}
		}
		want := []string{"approve: approved by mcp-elicitation: looks fine", "deny: denied by mcp-elicitation: not this one", "deny: denied by mcp-elicitation: declined in the MCP client"}
		if strings.Join(approvals, "\n") != strings.Join(want, "\n") {
			t.Errorf("the audit log's approvals:\n%s\nwant\n%s", strings.Join(approvals, "\n"), strings.Join(want, "\n"))
		}
	})
}

func runElicit(t *testing.T, dir string, env []string, args ...string) elicitResult {
	t.Helper()
	var r elicitResult
	runClient(t, dir, "elicit.mjs", env, &r, args...)
	return r
}
