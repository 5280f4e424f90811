package main

import (
	"strings"
	"testing"
)

// TestPauseCLI drives `airlock sandbox pause|resume` against a real daemon
// (native driver: a freeze, memory kept in the host).
func TestPauseCLI(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	key := newKey(t, dir, "agent")
	d := startDaemon(t, dir)
	env := []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + key}
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
	id := strings.TrimSpace(must("sandbox", "create"))
	must("sandbox", "exec", id, "--", "sh", "-c", "echo kept > state")
	if out := must("sandbox", "pause", id); !strings.Contains(out, id+" paused (frozen, memory kept in the host") {
		t.Fatalf("pause: %q", out)
	}
	if out := must("sandbox", "ls", "--state", "paused"); !strings.Contains(out, id) || !strings.Contains(out, "paused ") {
		t.Fatalf("ls --state paused:\n%s", out)
	}
	if o := cli("sandbox", "exec", id, "--", "true"); o.code == 0 || !strings.Contains(o.stderr, "is paused: resume it first") {
		t.Fatalf("exec in a paused sandbox: %d %s", o.code, o.stderr)
	}
	if o := cli("sandbox", "pause", id, "sb-nosuchsandbox"); o.code == 0 || !strings.Contains(o.stderr, "sb-nosuchsandbox") {
		t.Fatalf("pause of a paused and a missing sandbox: %d %s", o.code, o.stderr)
	}
	if out := must("sandbox", "resume", id); strings.TrimSpace(out) != id+" running" {
		t.Fatalf("resume: %q", out)
	}
	if got := must("sandbox", "exec", id, "--", "cat", "state"); got != "kept\n" {
		t.Fatalf("after the resume: %q", got)
	}
	must("sandbox", "pause", id)
	must("sandbox", "rm", id)
	if out := must("sandbox", "ls", "--state", "destroyed"); !strings.Contains(out, id) {
		t.Fatalf("a paused sandbox deleted is not destroyed:\n%s", out)
	}
}
