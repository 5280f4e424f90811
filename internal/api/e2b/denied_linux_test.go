package e2b

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestDeniedIsACommandResult: a command or a cell the policy refuses
// reaches the SDK as one that ran and failed (exit 126 with the rule on
// stderr; an execution error), which the SDKs raise as CommandExitError
// and return in execution.error, not as an RPC or HTTP error, which they
// raise as the sandbox breaking.
func TestDeniedIsACommandResult(t *testing.T) {
	pol, err := policy.New(policy.File{Rules: []policy.Rule{{
		Name: "no-shadow", When: `argv.exists(a, a.contains("shadow")) || code.contains("shadow")`,
		Decision: policy.Deny, Reason: "reading the host's password hashes is not allowed",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: "default"}}}
	e := newEnvOpts(t, supervisor.Options{Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}}, Config: cfg, Policy: pol}, nil)
	sb := e.create(e.key, `{}`)

	msgs, end := e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"cat","args":["/etc/shadow"]}}`, nil)
	if string(end) != "{}" || len(msgs) != 3 {
		t.Fatalf("Start of a denied command: %s, end %s; want start, stderr, end", msgs, end)
	}
	if string(msgs[0]) != `{"event":{"start":{}}}` {
		t.Errorf("first message %s, want a start with no pid", msgs[0])
	}
	var data struct {
		Event struct {
			Data struct{ Stderr []byte } `json:"data"`
		} `json:"event"`
	}
	if err := json.Unmarshal(msgs[1], &data); err != nil || !strings.HasPrefix(string(data.Event.Data.Stderr), "airlock: denied by policy (rule:no-shadow): reading the host's password hashes") {
		t.Errorf("stderr of a denied command: %s (%v)", msgs[1], err)
	}
	var endMsg struct {
		Event struct {
			End endEvent `json:"end"`
		} `json:"event"`
	}
	if err := json.Unmarshal(msgs[2], &endMsg); err != nil || endMsg.Event.End.ExitCode != ExitDenied || !endMsg.Event.End.Exited || endMsg.Event.End.Error == nil || !strings.Contains(*endMsg.Event.End.Error, "rule:no-shadow") {
		t.Errorf("end of a denied command: %s (%v)", msgs[2], err)
	}
	// An allowed command still runs.
	msgs, _ = e.stream(sb, "/process.Process/Start", `{"process":{"cmd":"echo","args":["fine"]}}`, nil)
	if len(msgs) != 3 || string(msgs[0]) != `{"event":{"start":{"pid":1}}}` {
		t.Errorf("an allowed command after a denied one: %s", msgs)
	}

	lines, st := e.execute(context.Background(), sb, `{"code":"open('/etc/shadow').read()"}`)
	if st != 200 {
		t.Fatalf("/execute of a denied cell: status %d, want 200 with an execution error", st)
	}
	er := find(lines, "error")
	if er == nil || er.Name != DeniedName || !strings.Contains(er.Value, "rule:no-shadow") || er.Traceback != "" || find(lines, "end_of_execution") == nil {
		t.Errorf("/execute of a denied cell: %+v", lines)
	}
}
