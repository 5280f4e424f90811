package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/audit"
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
	if code := run(context.Background(), []string{"audit", "tail", "-n", "5", logPath}, nil, &out, &out); code != 0 {
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
