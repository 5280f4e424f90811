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
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
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
	testcap.Require(t, "root", "userns", cg, "seccomp", "landlock", "overlay")
	open := cowProject(t, map[string]string{"main.go": "package main\n", "README": "read me\n"})
	gated := cowProject(t, map[string]string{"prod.conf": "live=1\n"})
	other := cowProject(t, map[string]string{"x": "x\n"})
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
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
	_, err = agent.CreateSandbox(ctx, client.CreateRequest{Mounts: []client.Mount{{Source: other, Target: "/work", Cow: true}}})
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
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%s: %+v %q %v", script, r, r.Stderr, err)
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
			shown = c.After.Digest
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
	// operator's; one discard.
	if applies != 5 || discards != 1 || byOperator != 1 {
		t.Errorf("audit: %d applies (%d by the operator), %d discards", applies, byOperator, discards)
	}
}
