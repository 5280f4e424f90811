package supervisor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

const guardPolicy = `
[ceilings]
memory = "1G"

[[rule]]
name = "no-secret-echo"
when = 'action == "exec" && argv.exists(a, a == "secret")'
decision = "deny"
reason = "do not echo secrets"

[[rule]]
name = "echo-please-asks"
when = 'action == "exec" && argv.exists(a, a == "please")'
decision = "ask"
reason = "polite requests need a person"

[approval]
timeout = "1s"
`

func guardFixture(t *testing.T, policyText string) (*Supervisor, *audit.Log, string) {
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
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}},
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
		Policy:       pol, Audit: al,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sup.Close(context.Background())
		al.Close()
		st.Close()
	})
	return sup, al, logPath
}

var operator = Caller{KeyID: "key-op", Operator: true}

func TestPolicyAndApprovals(t *testing.T) {
	sup, al, logPath := guardFixture(t, guardPolicy)
	ctx := context.Background()
	asker := Caller{KeyID: "key-agent-op", Operator: true} // an operator key asking for itself
	info, err := sup.Create(ctx, asker, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Above a ceiling: refused, not lowered.
	if _, err := sup.Create(ctx, asker, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 2 << 30}}); !errors.Is(err, policy.ErrDenied) {
		// the template allows 512M only, so narrow refuses first; both are refusals
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Fatalf("create above ceiling: %v", err)
		}
	}
	var out bytes.Buffer
	if _, err := sup.Exec(ctx, asker, info.ID, ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || out.String() != "hi\n" {
		t.Fatalf("allowed exec: %v %q", err, out.String())
	}
	_, err = sup.Exec(ctx, asker, info.ID, ExecRequest{Argv: []string{"rm", "-rf", "/"}})
	var denied *policy.Denied
	if !errors.As(err, &denied) || denied.Decision.Rule != "check:destructive_delete" {
		t.Fatalf("rm -rf /: %v", err)
	}
	if _, err = sup.Exec(ctx, asker, info.ID, ExecRequest{Argv: []string{"echo", "secret"}}); !errors.As(err, &denied) || denied.Decision.Rule != "rule:no-secret-echo" || denied.Decision.Reason != "do not echo secrets" {
		t.Fatalf("rule deny: %v", err)
	}

	// Ask: the exec waits until an operator that is not the asker approves.
	type result struct {
		out string
		err error
	}
	ask := func() (chan result, Approval) {
		ch := make(chan result, 1)
		go func() {
			var b bytes.Buffer
			_, err := sup.Exec(ctx, asker, info.ID, ExecRequest{Argv: []string{"echo", "please"}, Stdout: &b})
			ch <- result{b.String(), err}
		}()
		for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(5 * time.Millisecond) {
			list, err := sup.Approvals(ctx, operator)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range list {
				if a.State == ApprovalPending {
					return ch, a
				}
			}
		}
		t.Fatal("no pending approval appeared")
		return nil, Approval{}
	}
	ch, a := ask()
	if a.Rule != "rule:echo-please-asks" || a.Key != asker.KeyID || a.Request.Argv[1] != "please" {
		t.Fatalf("pending approval %+v", a)
	}
	if _, err := sup.Approvals(ctx, Caller{KeyID: "agent"}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("an agent key listed approvals: %v", err)
	}
	if _, err := sup.DecideApproval(ctx, Caller{KeyID: "agent"}, a.ID, true, ""); !errors.Is(err, ErrForbidden) {
		t.Fatalf("an agent key approved: %v", err)
	}
	if _, err := sup.DecideApproval(ctx, asker, a.ID, true, "me"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("the asking key approved its own action: %v", err)
	}
	select {
	case r := <-ch:
		t.Fatalf("exec ran before approval: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := sup.DecideApproval(ctx, operator, a.ID, true, "looks fine"); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r.err != nil || r.out != "please\n" {
		t.Fatalf("approved exec: %+v", r)
	}
	if _, err := sup.DecideApproval(ctx, operator, a.ID, false, ""); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("decided twice: %v", err)
	}
	// Denied by a person: refused with the reason.
	ch, a = ask()
	sup.DecideApproval(ctx, operator, a.ID, false, "not today")
	if r := <-ch; !errors.As(r.err, &denied) || !strings.Contains(denied.Decision.Reason, "not today") {
		t.Fatalf("denied approval: %+v", r)
	}
	// Nobody decides: denied after the timeout.
	ch, _ = ask()
	if r := <-ch; !errors.As(r.err, &denied) || !strings.Contains(denied.Decision.Reason, "expired") {
		t.Fatalf("expired approval: %+v", r)
	}

	// Files: writes and deletes are decided and recorded.
	l, err := sup.lookup(asker, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	files := &guardedFiles{Files: &memFiles{m: map[string][]byte{}}, s: sup, c: asker, l: l}
	if err := files.WriteFile(ctx, "/workspace/a.txt", strings.NewReader("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := files.Remove(ctx, "/workspace"); !errors.As(err, &denied) {
		t.Fatalf("removing the workspace root: %v", err)
	}
	if err := files.Remove(ctx, "/workspace/a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := sup.Kill(ctx, asker, info.ID); err != nil {
		t.Fatal(err)
	}

	al.Close()
	f, _ := os.Open(logPath)
	defer f.Close()
	rep, err := audit.Verify(f, audit.VerifyOptions{})
	if err != nil || !rep.OK() {
		t.Fatalf("audit log: %+v %v", rep, err)
	}
	b, _ := os.ReadFile(logPath)
	log := string(b)
	for _, want := range []string{
		`"kind":"create","key":"key-agent-op"`,
		`"kind":"exec","key":"key-agent-op","sandbox":"` + info.ID + `","template":"default","argv":["echo","hi"]`,
		`"stdout_sha256":"` + audit.Digest([]byte("hi\n")) + `"`,
		`"decision":"deny","rule":"check:destructive_delete"`,
		`"kind":"approval"`, `"decision":"approve"`, `approved by key-op: looks fine`, `denied by key-op: not today`, `expired`,
		`"kind":"file_write"`, `"sha256":"` + audit.Digest([]byte("data")) + `","size":4`,
		`"kind":"file_delete"`, `"kind":"destroy"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}

// memFiles is an in-memory sandbox.Files for the guard test.
type memFiles struct {
	sandbox.Files
	mu sync.Mutex
	m  map[string][]byte
}

func (f *memFiles) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	b, err := io.ReadAll(r)
	f.mu.Lock()
	f.m[path] = b
	f.mu.Unlock()
	return err
}

func (f *memFiles) Resolve(_ context.Context, path string) (string, error) { return path, nil }
func (f *memFiles) NoFollow() sandbox.Files                                { return f }

func (f *memFiles) Remove(ctx context.Context, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, path)
	return nil
}

func TestRedaction(t *testing.T) {
	sup, al, logPath := guardFixture(t, "[redact]\nvalues = [\"topsecret-123\"]\n")
	ctx := context.Background()
	info, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := sup.Exec(ctx, alice, info.ID, ExecRequest{Argv: []string{"echo", "key", "topsecret-123"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "key [REDACTED]\n" {
		t.Fatalf("output %q", out.String())
	}
	p, err := sup.StartProcess(ctx, alice, info.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"echo", "topsecret-123"}}})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := sup.Wait(ctx, alice, info.ID, p.ID)
	if err != nil || string(pi.Stdout) != "[REDACTED]\n" {
		t.Fatalf("background output %q %v", pi.Stdout, err)
	}
	al.Close()
	b, _ := os.ReadFile(logPath)
	if bytes.Contains(b, []byte("topsecret-123")) {
		t.Fatalf("the audit log holds the secret:\n%s", b)
	}
	if !bytes.Contains(b, []byte(audit.Digest([]byte("key [REDACTED]\n")))) {
		t.Fatal("the stdout digest is not of the redacted output")
	}
}

// TestPathRulesJudgeTheResolvedPath (security review F10): a path rule is
// checked on the path a write really lands on, and the audit log records
// that path: a symlink the sandbox made cannot steer a write past a rule.
func TestPathRulesJudgeTheResolvedPath(t *testing.T) {
	sup, al, logPath := guardFixture(t, `
[[rule]]
name = "no-writes-outside-workspace"
when = 'action == "file_write" && !path.startsWith("/workspace/")'
decision = "deny"
reason = "write under /workspace"
`)
	ctx := context.Background()
	info, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	files, done, err := sup.Files(ctx, alice, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	// What a command in the sandbox would do: a symlink to /tmp.
	l, err := sup.lookup(alice, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.inst.Files().Symlink(ctx, "/tmp", "/workspace/s"); err != nil {
		t.Fatal(err)
	}
	var denied *policy.Denied
	if err := files.WriteFile(ctx, "/workspace/s/via-symlink", strings.NewReader("x"), 0o644); !errors.As(err, &denied) || denied.Decision.Rule != "rule:no-writes-outside-workspace" {
		t.Fatalf("a write through a symlink to /tmp: %v; want denied by no-writes-outside-workspace", err)
	}
	if _, err := l.inst.Files().Stat(ctx, "/tmp/via-symlink"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the denied write landed in /tmp: %v", err)
	}
	// An allowed write through a symlink is recorded at the path it landed on.
	if err := l.inst.Files().Mkdir(ctx, "/workspace/real", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.inst.Files().Symlink(ctx, "/workspace/real", "/workspace/link"); err != nil {
		t.Fatal(err)
	}
	if err := files.WriteFile(ctx, "/workspace/link/f.txt", strings.NewReader("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, line := range strings.Split(string(log), "\n") {
		var ev struct{ Kind, Path string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Kind == "file_write" {
			writes = append(writes, ev.Path)
		}
	}
	if len(writes) != 1 || writes[0] != "/workspace/real/f.txt" {
		t.Errorf("file_write events at %q; want one, at /workspace/real/f.txt (where the write landed):\n%s", writes, log)
	}
}
