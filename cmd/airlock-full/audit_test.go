package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
)

func TestAuditVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	keyPath, logPath := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.log")
	key, err := audit.LoadOrCreateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.Open(logPath, audit.Options{Key: key, HeadPath: filepath.Join(dir, "audit.head")})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := l.Append(context.Background(), audit.Event{Kind: audit.KindFileWrite, Key: "k", Path: "/workspace/" + p}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	verify := func() (int, string) {
		var out bytes.Buffer
		code := cli.Run(context.Background(), []string{"audit", "verify", "--key", keyPath + ".pub", "--head", filepath.Join(dir, "audit.head"), logPath}, nil, &out, &out)
		return code, out.String()
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "OK: 5 lines") {
		t.Fatalf("intact log: exit %d: %s", code, out)
	}
	b, _ := os.ReadFile(logPath)
	os.WriteFile(logPath, bytes.Replace(b, []byte("/workspace/b"), []byte("/workspace/B"), 1), 0o600)
	if code, out := verify(); code != exitAuditBroken || !strings.Contains(out, "audit.log:3: edited") {
		t.Fatalf("edited log: exit %d: %s", code, out)
	}
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"audit", "tail", "-n", "2", logPath}, nil, &out, &out); code != 0 || strings.Count(out.String(), "\n") != 2 || !strings.Contains(out.String(), `"checkpoint"`) {
		t.Fatalf("tail: exit %d: %s", code, out.String())
	}
}

func TestRunDeniedByPolicy(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	pol := filepath.Join(dir, "p.toml")
	os.WriteFile(pol, []byte(`
[[rule]]
name = "no-python"
when = 'action == "exec" && argv[0] == "python3"'
decision = "deny"
reason = "python is not allowed here"

[[rule]]
name = "ls-asks"
when = 'action == "exec" && argv[0] == "ls"'
decision = "ask"
reason = "listing needs a person"
`), 0o600)
	tests := []struct {
		name    string
		args    []string
		rule    string
		message string
	}{
		{"built-in check", []string{"run", "--audit-log", logPath, "--audit-key", logPath + ".key", "--", "rm", "-rf", "/"}, "check:destructive_delete", "would delete"},
		{"policy rule", []string{"run", "--policy", pol, "--audit-log", logPath, "--audit-key", logPath + ".key", "--", "python3", "-c", "1"}, "rule:no-python", "python is not allowed here"},
		{"ask without approver", []string{"run", "--policy", pol, "--", "ls"}, "rule:ls-asks", "no approver"},
		{"ceiling", []string{"run", "--policy", "../../examples/policies/data-science.toml", "--memory", "4G", "--", "python3", "-c", "1"}, "ceiling:memory", "above the policy's ceiling"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := cli.Run(context.Background(), tt.args, nil, &out, &errb)
			if code != cli.ExitDenied || !strings.Contains(errb.String(), "denied by policy ("+tt.rule+")") || !strings.Contains(errb.String(), tt.message) {
				t.Fatalf("exit %d, stderr %q", code, errb.String())
			}
			out.Reset()
			args := append([]string{"run", "--json"}, tt.args[1:]...)
			code = cli.Run(context.Background(), args, nil, &out, &errb)
			var o map[string]any
			if err := json.Unmarshal(out.Bytes(), &o); err != nil || code != cli.ExitDenied || o["reason"] != "denied" || !strings.Contains(o["message"].(string), "("+tt.rule+")") {
				t.Fatalf("--json: exit %d: %s", code, out.String())
			}
		})
	}
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"audit", "verify", "--key", logPath + ".key.pub", "--head", logPath + ".head", logPath}, nil, &out, &out); code != 0 {
		t.Fatalf("verify: %s", out.String())
	}
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), `"kind":"policy","key":"cli","argv":["python3","-c","1"],"decision":"deny","rule":"rule:no-python"`) {
		t.Fatalf("the audit log lacks the denial:\n%s", b)
	}
}

func TestOpenDaemonGuard(t *testing.T) {
	dir := t.TempDir()
	pol, alog, err := openDaemonGuard(dir, filepath.Join(dir, "keys", "audit.key"), "../../examples/policies/data-science.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pol.ApprovalTimeout() != 10*time.Minute {
		t.Fatalf("policy not loaded: %v", pol.ApprovalTimeout())
	}
	if err := alog.Append(context.Background(), audit.Event{Kind: audit.KindCreate, Key: "k", Sandbox: "sb-1"}); err != nil {
		t.Fatal(err)
	}
	alog.Close()
	st, err := os.Stat(filepath.Join(dir, "keys", "audit.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"audit", "verify", "--key", filepath.Join(dir, "keys", "audit.key.pub"), "--head", filepath.Join(dir, "audit.head"), filepath.Join(dir, "audit.log")}, nil, &out, &out); code != 0 {
		t.Fatalf("verify: %s", out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestAuditTailFollow(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	key, _ := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	l, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan int)
	go func() { done <- cli.Run(ctx, []string{"audit", "tail", "-f", logPath}, nil, out, out) }()
	time.Sleep(300 * time.Millisecond)
	if err := l.Append(context.Background(), audit.Event{Kind: audit.KindFileWrite, Key: "k", Path: "/workspace/followed"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "/workspace/followed") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 || !strings.Contains(out.String(), "/workspace/followed") || !strings.Contains(out.String(), `"kind":"checkpoint"`) {
		t.Fatalf("tail -f: exit %d: %s", code, out.String())
	}
}
