package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// cowProject makes a host project directory (root's, not writable by
// others).
func cowProject(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "project")
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCowChanges drives copy-on-write mounts through the API and the Go
// SDK over real native sandboxes: create with a cow mount the policy
// allows, list the changes, apply a subset, a conflict, discard, the
// operator-only mounts, the audit log.
func TestCowChanges(t *testing.T) {
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	t.Run("native", func(t *testing.T) {
		testcap.Require(t, "root", "userns", cg, "seccomp", "landlock", "overlay")
		drv, err := native.New(native.Options{})
		if err != nil {
			t.Fatal(err)
		}
		testCowChanges(t, drv)
	})
	t.Run("gvisor", func(t *testing.T) {
		testcap.Require(t, "root", cg, "runsc", "overlay")
		drv, err := gvisor.New(gvisor.Options{})
		if err != nil {
			t.Fatal(err)
		}
		testCowChanges(t, drv)
	})
}

func testCowChanges(t *testing.T, drv sandbox.Driver) {
	open := cowProject(t, map[string]string{"main.go": "package main\n", "README": "read me\n"})
	gated := cowProject(t, map[string]string{"prod.conf": "live=1\n"})
	other := cowProject(t, map[string]string{"x": "x\n"})
	e, logPath := startPolicyEnvWith(t, fmt.Sprintf(`
mounts = ["%s:/work:cow", "%s:/prod:cow"]

[approval]
mounts = ["%s"]
`, open, gated, gated), drv)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, agentSecret := e.secret(store.RoleAgent)
	opKey, opSecret := e.secret(store.RoleOperator)
	agent, _ := client.New(e.url, agentSecret)
	op, _ := client.New(e.url, opSecret)

	// A mount the policy does not list is refused.
	_, err := agent.CreateSandbox(ctx, client.CreateRequest{Mounts: []client.Mount{{Source: other, Target: "/work", Cow: true}}})
	if ce := apiError(t, err, 403, "denied"); !strings.Contains(ce.Message, "allowlist") {
		t.Errorf("message: %s", ce.Message)
	}
	plain, err := agent.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := agent.Changes(ctx, plain.ID); err != nil || len(m) != 0 {
		t.Errorf("changes of a sandbox without cow mounts: %v %v", m, err)
	}
	if _, err := agent.Changes(ctx, "nosuchsandbox"); err == nil {
		t.Error("changes of an unknown sandbox")
	} else {
		apiError(t, err, 404, "not_found")
	}

	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{Mounts: []client.Mount{{Source: open, Target: "/work", Cow: true}}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id, script string) {
		t.Helper()
		r, err := agent.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		if r.ExitCode != 0 {
			t.Fatalf("%s: %+v %q", script, r, r.Stderr)
		}
	}
	run(sb.ID, "cd /work && echo 'func main() {}' >> main.go && echo new > new.txt && rm README")
	m, err := agent.Changes(ctx, sb.ID)
	if err != nil || len(m) != 1 {
		t.Fatalf("changes: %+v %v", m, err)
	}
	kinds := map[string]string{}
	for _, c := range m[0].Changes {
		kinds[c.Path] = c.Kind
	}
	if m[0].Target != "/work" || m[0].Source != open || m[0].Approval || len(kinds) != 3 || kinds["/work/main.go"] != "modified" || kinds["/work/new.txt"] != "added" || kinds["/work/README"] != "deleted" {
		t.Fatalf("changes %+v", m[0])
	}
	for _, c := range m[0].Changes {
		if c.Path == "/work/main.go" && !strings.Contains(c.Unified, "+func main() {}") {
			t.Errorf("main.go's diff %q", c.Unified)
		}
	}
	// The operator's listing names the sandbox and its key.
	pend, err := op.PendingChanges(ctx)
	if err != nil || len(pend) != 1 || pend[0].Sandbox != sb.ID || pend[0].Count != 3 || pend[0].Key == "" {
		t.Fatalf("pending: %+v %v", pend, err)
	}
	if _, err := agent.PendingChanges(ctx); err == nil {
		t.Error("an agent key listed every sandbox's changes")
	}

	var shown string
	for _, c := range m[0].Changes {
		if c.Path == "/work/main.go" {
			shown = c.Entry
		}
	}
	res, err := agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"main.go"}, Expect: map[string]string{"main.go": shown}})
	if err != nil || len(res.Applied) != 1 || !strings.HasPrefix(res.Applied[0].Digest, "sha256:") {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(open, "main.go")); string(b) != "package main\nfunc main() {}\n" {
		t.Errorf("host main.go %q", b)
	}
	// The host changes README under the sandbox's deletion: a conflict.
	if err := os.WriteFile(filepath.Join(open, "README"), []byte("edited on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Target: "/work"})
	ce := apiError(t, err, 409, "conflict")
	if len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "/work/README" {
		t.Errorf("conflicts %+v", ce.Conflicts)
	}
	if _, err := os.Stat(filepath.Join(open, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Error("new.txt was applied with a conflict in the same apply")
	}
	dres, err := agent.DiscardChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"README"}})
	if err != nil || len(dres.Discarded) != 1 {
		t.Fatalf("discard: %+v %v", dres, err)
	}
	if res, err = agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{}); err != nil || len(res.Applied) != 1 {
		t.Fatalf("apply the rest: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(open, "README")); string(b) != "edited on the host\n" {
		t.Errorf("host README %q", b)
	}
	if _, err := agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"../../etc/passwd"}}); err == nil {
		t.Error("apply of ../../etc/passwd")
	} else {
		apiError(t, err, 400, "invalid")
	}

	testCowReview(ctx, t, e, agent, agentSecret, open, run)

	// A mount that needs an operator.
	gsb, err := agent.CreateSandbox(ctx, client.CreateRequest{Mounts: []client.Mount{{Source: gated, Target: "/prod", Cow: true}}})
	if err != nil {
		t.Fatal(err)
	}
	run(gsb.ID, "echo live=0 > /prod/prod.conf")
	if m, _ := agent.Changes(ctx, gsb.ID); len(m) != 1 || !m[0].Approval {
		t.Errorf("gated changes %+v", m)
	}
	for _, f := range []func() error{
		func() error { _, err := agent.ApplyChanges(ctx, gsb.ID, client.ChangesRequest{}); return err },
		func() error { _, err := agent.DiscardChanges(ctx, gsb.ID, client.ChangesRequest{}); return err },
	} {
		if ce := apiError(t, f(), 403, "approval_required"); !strings.Contains(ce.Message, "operator must decide") {
			t.Errorf("message %q", ce.Message)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(gated, "prod.conf")); string(b) != "live=1\n" {
		t.Fatalf("the gated host file changed: %q", b)
	}
	if res, err := op.ApplyChanges(ctx, gsb.ID, client.ChangesRequest{}); err != nil || len(res.Applied) != 1 {
		t.Fatalf("operator apply: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(gated, "prod.conf")); string(b) != "live=0\n" {
		t.Errorf("the operator's apply did not reach the host: %q", b)
	}

	// The audit log has each apply and discard, who decided, and digests.
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var applies, discards, byOperator int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev struct {
			Kind, Key, Sandbox, Decision, Path, Host string
			Files                                    []struct{ Path, Before, After string }
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			continue
		}
		switch ev.Kind {
		case "cow_apply":
			applies++
			if ev.Key == opKey.ID {
				byOperator++
				if ev.Sandbox != gsb.ID || ev.Host != gated || len(ev.Files) != 1 || !strings.HasPrefix(ev.Files[0].After, "sha256:") || !strings.HasPrefix(ev.Files[0].Before, "sha256:") {
					t.Errorf("operator's apply event %+v", ev)
				}
			}
		case "cow_discard":
			discards++
		}
	}
	// main.go, the conflict, the rest, the refused ../../etc/passwd, the
	// review's four (testCowReview), the operator's; README's discard and
	// the review's.
	if applies != 9 || discards != 2 || byOperator != 1 {
		t.Errorf("audit: %d applies (%d by the operator), %d discards", applies, byOperator, discards)
	}
}

// testCowReview is the second security review's reproductions of N1, N3
// and N6 through the API, on the cow mount of open at /work of a fresh
// sandbox.
func testCowReview(ctx context.Context, t *testing.T, e *testEnv, agent *client.Client, secret, open string, run func(id, script string)) {
	t.Helper()
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{Mounts: []client.Mount{{Source: open, Target: "/work", Cow: true}}})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	// N1: y -> . and shadow -> y/…/../../victim (the review used
	// etc/shadow, which the policy check on commands refuses here).
	run(sb.ID, "cd /work && ln -s . y && ln -s "+strings.Repeat("y/", 10)+strings.Repeat("../", 10)+"victim shadow")
	m, err := agent.Changes(ctx, sb.ID)
	if err != nil || len(m) != 1 {
		t.Fatalf("changes: %+v %v", m, err)
	}
	for _, c := range m[0].Changes {
		if c.Path == "/work/shadow" && !strings.Contains(c.Refused, "leads outside") {
			t.Errorf("shadow: refused %q", c.Refused)
		}
	}
	res, err := agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"y", "shadow"}})
	if err != nil || len(res.Refused) != 1 || res.Refused[0].Path != "/work/shadow" {
		t.Fatalf("apply y, shadow: %+v %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(open, "shadow")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host shadow: %v", err)
	}
	if _, err := agent.DiscardChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"shadow"}}); err != nil {
		t.Fatal(err)
	}

	// N3: the review's request, as the console sent it before: the
	// content digest of mf and "" for the link; both changed since.
	run(sb.ID, "cd /work && ln -s sub/k lnk && echo data > mf && chmod 600 mf")
	if m, err = agent.Changes(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, c := range m[0].Changes {
		if c.Path == "/work/mf" {
			digest = c.After.Digest
		}
	}
	reviewed := m[0].Reviewed()
	run(sb.ID, "cd /work && ln -sfn sub/other lnk && chmod 4777 mf")
	body := fmt.Sprintf(`{"paths":["lnk","mf"],"expect":{"lnk":"","mf":%q}}`, digest)
	if st, _, b := e.raw("POST", "/v1/sandboxes/"+sb.ID+"/changes/apply", secret, strings.NewReader(body), map[string]string{"Content-Type": "application/json"}); st != 400 || !strings.Contains(string(b), "content digest") {
		t.Errorf("the review's apply: %d %s", st, b)
	}
	body = fmt.Sprintf(`{"paths":["lnk","mf"],"expect":{"lnk":%q,"mf":%q}}`, reviewed["/work/lnk"], reviewed["/work/mf"])
	st, _, b := e.raw("POST", "/v1/sandboxes/"+sb.ID+"/changes/apply", secret, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if st != 409 || !strings.Contains(string(b), `a symlink to \"sub/other\"`) || !strings.Contains(string(b), "mode 4777") {
		t.Errorf("apply of what changed since the review: %d %s", st, b)
	}
	for _, n := range []string{"lnk", "mf"} {
		if _, err := os.Lstat(filepath.Join(open, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host %s: %v", n, err)
		}
	}

	// N6: world-writable modes are shown as a warning and cleared.
	run(sb.ID, "cd /work && chmod 600 mf && mkdir sgd && chmod 2777 sgd && echo w > sgd/ww && chmod 666 sgd/ww")
	if m, err = agent.Changes(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range m[0].Changes {
		if (c.Path == "/work/sgd" || c.Path == "/work/sgd/ww") != strings.Contains(c.Warning, "world-writable") {
			t.Errorf("%s: warning %q", c.Path, c.Warning)
		}
	}
	res, err = agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Paths: []string{"lnk", "mf", "sgd"}, Expect: m[0].Reviewed()})
	if err != nil || len(res.Applied) != 4 {
		t.Fatalf("apply: %+v %v", res, err)
	}
	for n, want := range map[string]os.FileMode{"mf": 0o600, "sgd": os.ModeDir | 0o755, "sgd/ww": 0o644} {
		if fi, err := os.Lstat(filepath.Join(open, n)); err != nil || fi.Mode() != want {
			t.Errorf("host %s: %v, want %v (%v)", n, fi.Mode(), want, err)
		}
	}
}
