package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// cowDaemon starts a daemon whose policy lets API creates mount project
// at /w copy-on-write, and returns it with the CLI's environment.
func cowDaemon(t *testing.T, project string) (dir string, d *daemon, env []string, pol string) {
	t.Helper()
	requireE2E(t)
	testcap.Require(t, "overlay")
	dir = t.TempDir()
	pol = filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte(fmt.Sprintf("mounts = [%q]\n", project+":/w:cow")), 0o600); err != nil {
		t.Fatal(err)
	}
	key := newKey(t, dir, "agent")
	d = startDaemon(t, dir, "--policy", pol)
	return dir, d, []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + key}, pol
}

// TestCowCLI: `airlock sandbox create --mount DIR:/w:cow`, then `airlock
// sandbox changes` to review, apply a subset, meet a conflict, discard.
func TestCowCLI(t *testing.T) {
	project := filepath.Join(t.TempDir(), "project")
	writeFiles(t, project, map[string]string{"a.txt": "one\ntwo\n", "b.txt": "b\n"})
	_, _, env, _ := cowDaemon(t, project)
	cli := func(args ...string) outcomeOf {
		t.Helper()
		return airlockRun(t, invocation{args: args, env: env})
	}
	must := func(args ...string) string {
		t.Helper()
		o := cli(args...)
		if o.code != 0 {
			t.Fatalf("airlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), o.code, o.stdout, o.stderr)
		}
		return o.stdout
	}
	// A one-shot run: the sandbox edits the project; nothing reaches the
	// host, and airlock says so.
	o := airlockRun(t, invocation{args: []string{"run", "--mount", project + ":/w:cow", "--", "sh", "-c", "echo x >> /w/a.txt && cat /w/a.txt"}})
	if o.code != 0 || o.stdout != "one\ntwo\nx\n" || !strings.Contains(o.stderr, "holds 1 change(s) to "+project+", discarded with this one-shot sandbox") {
		t.Errorf("airlock run with a cow mount: %d %q %q", o.code, o.stdout, o.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "one\ntwo\n" {
		t.Fatalf("a one-shot run changed the host: %q", b)
	}
	if o := cli("sandbox", "create", "--mount", "/etc:/w:cow"); o.code == 0 || !strings.Contains(o.stderr, "allowlist") {
		t.Errorf("a mount the policy does not list: %d %s", o.code, o.stderr)
	}
	id := strings.TrimSpace(must("sandbox", "create", "--mount", project+":/w:cow"))
	must("sandbox", "exec", id, "--", "sh", "-c", "cd /w && printf 'one\\nTWO\\n' > a.txt && echo new > c.txt && echo sb > b.txt && ln -s /etc/passwd pw")
	out := must("sandbox", "changes", id)
	for _, want := range []string{"cow mount /w (host " + project + ")", "modified /w/a.txt", "added    /w/c.txt", "-two\n+TWO\n", "refused  /w/pw: a symlink to the absolute path /etc/passwd"} {
		if !strings.Contains(out, want) {
			t.Errorf("changes lack %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "one\ntwo\n" {
		t.Fatalf("the host changed before any apply: %q", b)
	}
	// What was reviewed is what applies (N3 of the second security
	// review): a listing saved with --json, then a mode changed since, is
	// a conflict naming it.
	review := filepath.Join(t.TempDir(), "review.json")
	if err := os.WriteFile(review, []byte(must("sandbox", "changes", "--json", id)), 0o600); err != nil {
		t.Fatal(err)
	}
	must("sandbox", "exec", id, "--", "chmod", "666", "/w/c.txt")
	o = cli("sandbox", "changes", "--apply", "--reviewed", review, id, "a.txt", "c.txt")
	if o.code != 3 || !strings.Contains(o.stderr, "/w/c.txt: the sandbox changed it after it was shown (it is now a file, mode 0666") {
		t.Errorf("apply of a reviewed listing after a chmod: %d %s %s", o.code, o.stdout, o.stderr)
	}
	must("sandbox", "exec", id, "--", "chmod", "644", "/w/c.txt")
	out = must("sandbox", "changes", "--apply", "--reviewed", review, id, "a.txt", "c.txt")
	if !strings.Contains(out, "2 applied, 0 refused") {
		t.Errorf("apply: %s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(project, "a.txt")); string(b) != "one\nTWO\n" {
		t.Errorf("host a.txt %q", b)
	}
	// The host edits b.txt meanwhile: a conflict, nothing applied.
	if err := os.WriteFile(filepath.Join(project, "b.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o = cli("sandbox", "changes", "--apply", id)
	if o.code != 3 || !strings.Contains(o.stderr, "nothing was applied") || !strings.Contains(o.stderr, "/w/b.txt: the host changed b.txt") {
		t.Errorf("conflicting apply: %d %s %s", o.code, o.stdout, o.stderr)
	}
	out = must("sandbox", "changes", "--discard", id, "b.txt")
	if !strings.Contains(out, "discarded /w/b.txt") {
		t.Errorf("discard: %s", out)
	}
	out = must("sandbox", "changes", "--apply", id)
	if !strings.Contains(out, "0 applied, 1 refused") {
		t.Errorf("apply the rest (the symlink is refused): %s", out)
	}
	if _, err := os.Lstat(filepath.Join(project, "pw")); err == nil {
		t.Error("the symlink to /etc/passwd reached the host")
	}
	if b, _ := os.ReadFile(filepath.Join(project, "b.txt")); string(b) != "host\n" {
		t.Errorf("host b.txt %q", b)
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCowDaemonKilledDuringApply kills the daemon (SIGKILL) in the middle
// of an apply: every host file is then old or new, never torn; the next
// daemon says which were applied (log and audit log), the sandbox lives
// on, and the rest still applies.
func TestCowDaemonKilledDuringApply(t *testing.T) {
	const n = 200
	old, new := strings.Repeat("old ", 64<<10), strings.Repeat("new ", 64<<10)
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("f%03d", i)] = old
	}
	project := filepath.Join(t.TempDir(), "project")
	writeFiles(t, project, files)
	dir, d, env, pol := cowDaemon(t, project)
	cli := func(args ...string) outcomeOf {
		t.Helper()
		return airlockRun(t, invocation{args: args, env: env})
	}
	o := cli("sandbox", "create", "--mount", project+":/w:cow")
	id := strings.TrimSpace(o.stdout)
	if o.code != 0 {
		t.Fatalf("create: %s", o.stderr)
	}
	if o := cli("sandbox", "exec", id, "--", "sh", "-c", `cd /w && for f in f*; do sed 's/old/new/g' $f > $f.t && mv $f.t $f; done`); o.code != 0 {
		t.Fatalf("exec: %s", o.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	apply := airlockCmd(ctx, invocation{args: []string{"sandbox", "changes", "--apply", id}, env: env})
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = apply.Process.Kill(); _ = apply.Wait() }()
	journals := "/run/airlock/cow/" + id + "/0/journal.json"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(journals); err == nil {
			break
		}
	}
	// Let it write some files first.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(filepath.Join(project, "f010")); string(b) == new {
			break
		}
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done
	_ = apply.Wait()

	applied := 0
	for i := range n {
		b, err := os.ReadFile(filepath.Join(project, fmt.Sprintf("f%03d", i)))
		switch {
		case err != nil:
			t.Fatal(err)
		case string(b) == new:
			applied++
		case string(b) != old:
			t.Fatalf("f%03d is torn: %d bytes", i, len(b))
		}
	}
	if applied == n {
		t.Skip("the apply finished before the daemon was killed: nothing to recover")
	}
	t.Logf("the daemon was killed after %d of %d files", applied, n)
	d2 := startDaemon(t, dir, "--policy", pol)
	if l := d2.log(); !strings.Contains(l, "an apply of a cow mount's changes was interrupted") {
		t.Errorf("the new daemon does not report the interrupted apply:\n%s", l)
	}
	b, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil || !strings.Contains(string(b), `"kind":"cow_recover"`) || !strings.Contains(string(b), fmt.Sprintf("%d path(s) applied", applied)) {
		t.Errorf("the audit log lacks the recovery (%v)", err)
	}
	env2 := []string{"AIRLOCK_URL=" + d2.url, env[1]}
	o = airlockRun(t, invocation{args: []string{"sandbox", "changes", "--json", id}, env: env2})
	if o.code != 0 || strings.Count(o.stdout, `"kind": "modified"`) != n-applied {
		t.Errorf("pending after the restart: want %d modified\n%s %s", n-applied, o.stdout, o.stderr)
	}
	o = airlockRun(t, invocation{args: []string{"sandbox", "changes", "--apply", id}, env: env2})
	if o.code != 0 || !strings.Contains(o.stdout, fmt.Sprintf("%d applied, 0 refused", n-applied)) {
		t.Errorf("apply the rest: %d %s %s", o.code, o.stdout, o.stderr)
	}
	for i := range n {
		if b, _ := os.ReadFile(filepath.Join(project, fmt.Sprintf("f%03d", i))); string(b) != new {
			t.Fatalf("f%03d not applied in the end", i)
		}
	}
}
