package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// hostile is what a sandbox writes to rewrite a reviewer's terminal (the
// review's N4): a window title, a cursor move up and a line erase, a bidi
// override, a zero-width space, a C1 CSI as UTF-8 and as a bare byte.
const hostile = "\x1b]0;PWNED-TITLE\x07\x1b[1A\x1b[2Kharmless\u202eevil\u200b\u009b2J"

// fakeDaemon answers the CLI's calls with what a hostile sandbox (or an
// older daemon that sends its text as it is) would put in them.
func fakeDaemon(t *testing.T) {
	t.Helper()
	js := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/sb-1/diff", func(w http.ResponseWriter, r *http.Request) {
		// An older daemon's text: content as it is.
		_, _ = w.Write([]byte("diff sn-1 → now: 1 added\nadded    /workspace/x (file)\n--- /dev/null\n+++ b/workspace/x\n@@ -0,0 +1,2 @@\n+line1\n+" + hostile + "\n"))
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/changes", func(w http.ResponseWriter, r *http.Request) {
		after := map[string]any{"path": "/w/colors" + hostile + ".txt", "type": "file", "mode": 0o644, "size": 10, "digest": "sha256:ab"}
		js(w, map[string]any{"mounts": []any{map[string]any{
			"target": "/w", "source": "/home/me/project",
			"changes": []any{map[string]any{
				"path": "/w/colors" + hostile + ".txt", "kind": "added", "after": after,
				"unified": "--- /dev/null\n+++ b/w/colors.txt\n@@ -0,0 +1,2 @@\n+line1\n+" + hostile + "\n",
				"refused": "refused because " + hostile,
			}},
		}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/changes/apply", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"target": "/w",
			"applied": []any{map[string]any{"path": "/w/a" + hostile, "kind": "added", "note": hostile}},
			"refused": []any{map[string]any{"path": "/w/b" + hostile, "reason": hostile}}})
	})
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"sandboxes": []any{map[string]any{"id": "sb-1", "state": "running", "template": "t" + hostile + "\tfake", "end_reason": hostile, "mismatch": hostile}}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"snapshots": []any{map[string]any{"id": "sn-1", "name": "n" + hostile, "label": hostile, "sandbox": "sb-1", "kind": "manual"}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/sb-1/export", func(w http.ResponseWriter, r *http.Request) {
		js(w, map[string]any{"objects": []any{map[string]any{"path": "/w/r" + hostile, "object": "s3://b/r" + hostile, "content_type": "text/csv", "sha256": "ab"}},
			"skipped": []string{"/w/l" + hostile}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-1/processes/p-1/output", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		_ = enc.Encode(map[string]any{"type": "start", "id": "p-1"})
		// One character split between two events: shown whole.
		_ = enc.Encode(map[string]any{"type": "stdout", "data_base64": base64.StdEncoding.EncodeToString([]byte("out " + hostile + " \xe6"))})
		_ = enc.Encode(map[string]any{"type": "stdout", "data_base64": "l6U=", "offset": 10})
		_ = enc.Encode(map[string]any{"type": "stderr", "data": "err " + hostile})
		_ = enc.Encode(map[string]any{"type": "result", "result": map[string]any{"exit_code": -1, "signal": "KILL", "reason": "killed", "message": "killed: " + hostile}})
	})
	mux.HandleFunc("GET /v1/sandboxes/sb-2/diff", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": "not_found", "message": "no file " + hostile}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Setenv("AIRLOCK_URL", srv.URL)
	t.Setenv("AIRLOCK_API_KEY", "ak-test")
}

// TestOutputShownNotObeyed: every command that prints what a sandbox
// controls prints it through termsafe: no control, bidi or zero-width
// character reaches the terminal (security review 2, N4).
func TestOutputShownNotObeyed(t *testing.T) {
	fakeDaemon(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "audit.log")
	key, _ := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	l, err := audit.Open(logPath, audit.Options{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(context.Background(), audit.Event{Kind: audit.KindFileWrite, Key: "k", Path: "/workspace/" + hostile}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // each in stdout+stderr
	}{
		{name: "sandbox diff", args: []string{"sandbox", "diff", "sb-1"}, want: []string{"+⟨U+001B⟩]0;PWNED-TITLE⟨U+0007⟩⟨U+001B⟩[1A⟨U+001B⟩[2Kharmless⟨U+202E⟩evil⟨U+200B⟩⟨U+009B⟩2J\n"}},
		{name: "sandbox changes", args: []string{"sandbox", "changes", "sb-1"}, want: []string{
			"+⟨U+001B⟩]0;PWNED-TITLE", "added    /w/colors⟨U+001B⟩]0;PWNED-TITLE", "control characters)", "refused  /w/colors⟨U+001B⟩", "refused because ⟨U+001B⟩]0;",
		}},
		{name: "sandbox changes --apply", args: []string{"sandbox", "changes", "--apply", "sb-1"}, want: []string{"applied  added    /w/a⟨U+001B⟩]0;", "(⟨U+001B⟩]0;", "refused  /w/b⟨U+001B⟩]0;PWNED-TITLE⟨U+0007⟩⟨U+001B⟩[1A⟨U+001B⟩[2Kharmless⟨U+202E⟩evil⟨U+200B⟩⟨U+009B⟩2J: ⟨U+001B⟩"}},
		{name: "sandbox ls", args: []string{"sandbox", "ls"}, want: []string{"t⟨U+001B⟩]0;PWNED-TITLE⟨U+0007⟩⟨U+001B⟩[1A⟨U+001B⟩[2Kharmless⟨U+202E⟩evil⟨U+200B⟩⟨U+009B⟩2J⟨U+0009⟩fake", "sb-1: ⟨U+001B⟩]0;"}},
		{name: "snapshot ls", args: []string{"sandbox", "snapshot", "ls", "sb-1"}, want: []string{"n⟨U+001B⟩]0;PWNED-TITLE"}},
		{name: "sandbox export", args: []string{"sandbox", "export", "sb-1:/w/r", "s3://b/"}, want: []string{"s3://b/r⟨U+001B⟩]0;", "skipped /w/l⟨U+001B⟩]0;"}},
		{name: "sandbox attach (pipes)", args: []string{"sandbox", "attach", "sb-1", "p-1"}, code: 128 + 9, want: []string{"out ⟨U+001B⟩]0;PWNED-TITLE", "2J 日", "err ⟨U+001B⟩]0;", "airlock: killed: ⟨U+001B⟩]0;"}},
		{name: "an error", args: []string{"sandbox", "diff", "sb-2"}, code: cli.ExitAirlock, want: []string{"no file ⟨U+001B⟩]0;PWNED-TITLE"}},
		{name: "audit tail", args: []string{"audit", "tail", logPath}, want: []string{`/workspace/\u001b]0;PWNED-TITLE\u0007\u001b[1A\u001b[2Kharmless\u202eevil\u200b\u009b2J`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := cli.Run(context.Background(), tc.args, strings.NewReader(""), &out, &out)
			s := out.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, s)
			}
			for _, r := range s {
				if r != '\n' && r != '\t' && termsafe.Hidden(r) {
					t.Fatalf("%U reached the terminal:\n%s", r, s)
				}
			}
			if strings.Contains(s, "\ufffd") {
				t.Errorf("a character was cut:\n%s", s)
			}
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("lacks %q:\n%s", w, s)
				}
			}
		})
	}
}

// TestShownOn: output redirected to a file is the process's bytes.
func TestShownOn(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if w := shownOn(f); w != f {
		t.Errorf("a file: %T", w)
	}
	if _, ok := shownOn(&bytes.Buffer{}).(*termsafe.Writer); !ok {
		t.Error("not a file: not rendered")
	}
}
