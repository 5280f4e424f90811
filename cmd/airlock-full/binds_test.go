package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
)

// TestAuditTailShowsControls: `airlock audit tail` prints each event with
// the characters a terminal would not show as themselves (bidi overrides,
// zero-width, controls) as JSON escapes, so the operator reads what ran;
// each line stays the same JSON value.
func TestAuditTailShowsControls(t *testing.T) {
	dir := t.TempDir()
	key, err := audit.LoadOrCreateKey(filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	l, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"echo", "safe-looking \u202e)\"~ fr- mr\"(metsys.so", "zero\u200bwidth", "bell\a", "\U000e0041tag", "caf\u00e9"}
	if err := l.Append(context.Background(), audit.Event{Kind: audit.KindExec, Argv: argv}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"audit", "tail", "-n", "5", logPath}, nil, &out, &out); code != 0 {
		t.Fatalf("tail: %d %s", code, out.String())
	}
	for _, raw := range []string{"\u202e", "\u200b", "\a", "\U000e0041"} {
		if strings.Contains(out.String(), raw) {
			t.Errorf("tail prints %q as itself: %s", raw, out.String())
		}
	}
	for _, want := range []string{`\u202e`, `\u200b`, `\udb40\udc41`, "café"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tail lacks %s: %s", want, out.String())
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("tail line is not JSON: %v: %s", err, line)
		}
		if ev.Kind == audit.KindExec && strings.Join(ev.Argv, "|") != strings.Join(argv, "|") {
			t.Fatalf("tail changed the event: %q", ev.Argv)
		}
	}
}

// TestVerifyReportsUnsealedTail: lines after the last signed checkpoint
// (a crashed writer's) can be rewritten by anyone who can write the file;
// `airlock audit verify` reports them as not sealed and does not exit 0
// (the security review's F15 rewrote such a tail and verify said OK).
func TestVerifyReportsUnsealedTail(t *testing.T) {
	dir := t.TempDir()
	keyPath, logPath := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.log")
	key, err := audit.LoadOrCreateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	// A writer that seals rarely, copied while it runs: as after kill -9.
	l, err := audit.Open(logPath, audit.Options{Key: key, HeadPath: filepath.Join(dir, "audit.head"), CheckpointEvery: 1000, CheckpointInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []string{"pwd", "id", "ls"} {
		if err := l.Append(context.Background(), audit.Event{Kind: audit.KindExec, Code: c, Language: "sh"}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite the last event and recompute the chain: no key needed.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var ev audit.Event
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &ev)
	ev.Code, ev.Argv, ev.Language = "", []string{"echo", "innocent"}, ""
	ev.Prev = audit.Digest([]byte(lines[len(lines)-2]))
	nb, _ := json.Marshal(ev)
	lines[len(lines)-1] = string(nb)
	copyPath := filepath.Join(dir, "copy.log")
	if err := os.WriteFile(copyPath, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := cli.Run(context.Background(), []string{"audit", "verify", "--key", keyPath + ".pub", "--head", filepath.Join(dir, "audit.head"), copyPath}, nil, &out, &out)
	if code != exitAuditUnsealed || !strings.Contains(out.String(), "NOT SEALED") || !strings.Contains(out.String(), "3 line(s)") {
		t.Fatalf("verify of a log with a rewritten unsealed tail: exit %d: %s", code, out.String())
	}
}

// TestAuditKeyOutsideLogDir: the daemon's checkpoint key is by default
// outside the directory of the log it signs, so that a copy of the state
// directory (a backup, a shipped log) cannot be re-signed with it (the
// security review's F16 re-signed a rewritten log with STATE/audit.key);
// a key left in the state directory by an earlier version is refused with
// what to do.
func TestAuditKeyOutsideLogDir(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	state := t.TempDir()
	_, alog, err := openDaemonGuard(state, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	alog.Close()
	if _, err := os.Stat(filepath.Join(state, "audit.key")); err == nil {
		t.Fatal("the daemon made its audit key in its state directory, next to the log")
	}
	k := cli.DefaultAuditKey()
	if rel, err := filepath.Rel(state, k); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("default audit key %s is inside the state directory %s", k, state)
	}
	if st, err := os.Stat(k); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the key at its default place: %v %v", st, err)
	}
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"audit", "verify", "--key", k + ".pub", "--head", filepath.Join(state, "audit.head"), filepath.Join(state, "audit.log")}, nil, &out, &out); code != 0 {
		t.Fatalf("verify with the default key: %s", out.String())
	}
	// An old key in the state directory: refused, with the fix.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "audit.key"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := openDaemonGuard(old, "", "", nil); err == nil || !strings.Contains(err.Error(), "--audit-key") {
		t.Fatalf("a key in the state directory: %v", err)
	}
}
