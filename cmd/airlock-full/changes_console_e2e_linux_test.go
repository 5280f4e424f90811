package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api/webtest"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// TestChangesPageInChromium is the review page's end-to-end test (issue
// 19): a real `airlock serve` whose policy keeps the changes of a host
// directory for an operator runs a sandbox with a copy-on-write mount of
// it and of a second directory (whose changes its key may decide). The
// sandbox adds a file whose name is markup, puts a script and a bidi
// override into a file's content and another into a file's name,
// deletes, chmods, makes a directory, a symlink and a FIFO (which apply
// refuses), and adds a file to the second mount. Its own key may list the
// changes but not apply or discard those of the first; the console
// refuses an apply without its CSRF token or from another origin.
// Headless Chromium (internal/api/webtest/changes.mjs) then logs in as an
// operator, finds both mounts in the list and on the sandbox's page,
// applies the second mount's change, reads every file's diff (the
// payloads as text, the overrides as marked escapes, no script run), sees
// an apply of a path the host changed refused as a conflict, sees an
// apply of a file the sandbox rewrote after the page showed it refused too
// (the page sends the digests it showed), applies the two chosen files as
// shown again, sees a change made while it shows announced, discards the
// rest, sees the list empty and the apply in the audit log. The test
// checks on disk that exactly the files applied changed on the host, and
// the audit log names the operator.
func TestChangesPageInChromium(t *testing.T) {
	requireE2E(t)
	testcap.Require(t, "overlay")
	webDir := webtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The host directory: root's files, readable by the sandbox's users.
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(base, "project")
	host := map[string]string{"keep.txt": "keep me\n", "edit.txt": "line one\nline two\n", "gone.txt": "gone?\n", "tool.sh": "#!/bin/sh\necho tool\n"}
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range host {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A second host directory, mounted at /data: its owner may decide.
	src2 := filepath.Join(base, "data")
	if err := os.Mkdir(src2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src2, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	state := filepath.Join(t.TempDir(), "state")
	keyOf := func(role, name string) string {
		o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", state, "--role", role, "--name", name}})
		if o.code != 0 {
			t.Fatalf("keys create: %d %s", o.code, o.stderr)
		}
		return strings.TrimSpace(o.stdout)
	}
	opSecret, agentSecret := keyOf("operator", "ops"), keyOf("agent", "coder")
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte(`mounts = ["`+src+`:/work:cow", "`+src2+`:/data:cow"]
[approval]
mounts = ["`+src+`"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, "--policy", pol)
	op, _ := client.New(d.url, opSecret)
	agent, _ := client.New(d.url, agentSecret)
	keys, err := op.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyID := map[string]string{}
	for _, k := range keys {
		keyID[k.Name] = k.ID
	}

	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{TTL: 10 * time.Minute, Mounts: []client.Mount{{Source: src, Target: "/work", Cow: true}, {Source: src2, Target: "/data", Cow: true}}})
	if err != nil {
		t.Fatal(err)
	}
	imgName := `<img src=x onerror=alert(1)>.txt`
	bidiName := "report\u202Etxt.exe" // reads as report + "exe.txt" reversed
	edited := "line one\n<script>alert(\"diff\")</script> \u202Etxt.exe\nline two\n"
	r, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", `set -e
cd /work
printf '%s' "$1" > edit.txt
printf 'hello <b>there</b>\n' > "$2"
rm gone.txt
chmod 755 tool.sh
mkdir new
printf 'inner\n' > new/inner.txt
ln -s edit.txt link
mkfifo pipe
printf 'x\n' > "$3"
printf 'b\n' > /data/b.txt`, "sh", edited, imgName, bidiName}})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("the sandbox's writes: %+v %v", r, err)
	}
	// The host changes tool.sh under the sandbox: applying the sandbox's
	// chmod of it is a conflict.
	hostTool := "#!/bin/sh\necho changed on the host\n"
	if err := os.WriteFile(filepath.Join(src, "tool.sh"), []byte(hostTool), 0o644); err != nil {
		t.Fatal(err)
	}
	host["tool.sh"] = hostTool
	want := []string{"/work/" + imgName, "/work/edit.txt", "/work/gone.txt", "/work/link", "/work/new", "/work/new/inner.txt", "/work/pipe", "/work/" + bidiName, "/work/tool.sh"}
	mounts, err := agent.Changes(ctx, sb.ID)
	if err != nil || len(mounts) != 2 || mounts[0].Target != "/work" || !mounts[0].Approval || mounts[1].Approval || len(mounts[1].Changes) != 1 {
		t.Fatalf("the sandbox's key lists its changes: %+v %v", mounts, err)
	}
	var got []string
	for _, c := range mounts[0].Changes {
		got = append(got, c.Path)
	}
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Fatalf("pending changes %q, want %q", got, want)
	}
	// The policy keeps them for a person: the sandbox's key cannot decide.
	var ce *client.Error
	if _, err := agent.ApplyChanges(ctx, sb.ID, client.ChangesRequest{Target: "/work", Paths: []string{"edit.txt"}}); !errors.As(err, &ce) || ce.Status != 403 || ce.Code != "approval_required" {
		t.Fatalf("an apply by the sandbox's own key: %v", err)
	}
	if _, err := agent.DiscardChanges(ctx, sb.ID, client.ChangesRequest{Target: "/work"}); !errors.As(err, &ce) || ce.Status != 403 {
		t.Fatalf("a discard by the sandbox's own key: %v", err)
	}
	// The console's apply needs the session's CSRF token and the page's
	// own Origin.
	cookie, csrf := consoleLogin(t, d.url, opSecret)
	apply := "/ui/api/sandboxes/" + sb.ID + "/changes/apply"
	for _, tc := range []struct{ name, origin, csrf string }{
		{"without a CSRF token", d.url, ""},
		{"with a wrong CSRF token", d.url, csrf + "x"},
		{"from another origin", "http://evil.example", csrf},
	} {
		if st, body := consolePost(t, d.url, apply, cookie, tc.origin, tc.csrf, `{"target":"/work"}`); st != 403 {
			t.Fatalf("a console apply %s: %d %s", tc.name, st, body)
		}
	}
	checkHost(t, src, host, nil)
	checkHost(t, src2, map[string]string{"a.txt": "a\n"}, nil)

	// What the sandbox writes to imgName after the page showed it: the
	// apply of what was shown is a conflict; the apply after the page
	// showed this writes it.
	late := "rewritten after the review\n"
	out := t.ArtifactDir()
	plan, _ := json.Marshal(map[string]any{
		"sandbox": sb.ID, "target": "/work", "source": src, "key": keyID["coder"], "keyName": "coder", "paths": want,
		"img": "/work/" + imgName, "edit": "/work/edit.txt", "conflict": "/work/tool.sh", "link": "/work/link", "inner": "/work/new/inner.txt", "fifo": "/work/pipe", "bidiName": "/work/" + bidiName,
		"target2": "/data", "source2": src2, "added2": "/data/b.txt",
		"late":  late,
		"apply": []string{"/work/" + imgName, "/work/edit.txt"},
	})
	res, err := webtest.Run(t, webDir, 2*time.Minute, "changes.mjs", d.url, opSecret, agentSecret, out, string(plan))
	if err != nil {
		t.Fatalf("the browser run failed: %v", err)
	}
	var result struct{ Applied, Discarded []string }
	if i := strings.LastIndex(res, "RESULT "); i < 0 || json.Unmarshal([]byte(strings.TrimSpace(res[i+7:])), &result) != nil {
		t.Fatalf("no result from the browser: %s", res)
	}

	// Exactly the two files chosen changed on the host.
	host["edit.txt"] = edited
	checkHost(t, src, host, map[string]string{imgName: late})
	if fi, err := os.Stat(filepath.Join(src, "tool.sh")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("tool.sh's mode on the host: %v %v", fi.Mode(), err)
	}
	checkHost(t, src2, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}, nil)
	if mounts, err := op.Changes(ctx, sb.ID); err != nil || len(mounts) != 2 || len(mounts[0].Changes)+len(mounts[1].Changes) != 0 {
		t.Fatalf("changes left after the page discarded the rest: %+v %v", mounts, err)
	}
	if p, err := op.PendingChanges(ctx); err != nil || len(p) != 0 {
		t.Fatalf("the operator's listing after the page: %+v %v", p, err)
	}
	auditLog, err := os.ReadFile(filepath.Join(state, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var applies, discards int
	for _, l := range bytes.Split(auditLog, []byte("\n")) {
		var ev struct{ Kind, Key, Sandbox string }
		if json.Unmarshal(l, &ev) != nil || ev.Sandbox != sb.ID {
			continue
		}
		switch ev.Kind {
		case "cow_apply":
			applies++
			if ev.Key != keyID["ops"] {
				t.Errorf("an apply in the audit log by %q, not the operator: %s", ev.Key, l)
			}
		case "cow_discard":
			discards++
			if ev.Key != keyID["ops"] {
				t.Errorf("a discard in the audit log by %q, not the operator: %s", ev.Key, l)
			}
		}
	}
	if applies == 0 || discards == 0 {
		t.Errorf("the audit log has %d applies and %d discards of %s", applies, discards, sb.ID)
	}
	t.Logf("the page applied %q and discarded %q; screenshots: %s", result.Applied, result.Discarded, out)
}

// checkHost fails unless directory dir holds exactly the files of want
// and extra, with that content.
func checkHost(t *testing.T, dir string, want, extra map[string]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{}
	for k, v := range want {
		all[k] = v
	}
	for k, v := range extra {
		all[k] = v
	}
	if len(ents) != len(all) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the host directory holds %q, want %d files", names, len(all))
	}
	for name, content := range all {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != content {
			t.Fatalf("host file %q: %q %v, want %q", name, b, err, content)
		}
	}
}

// consoleLogin logs in to the console with key and returns the session's
// cookie and CSRF token.
func consoleLogin(t *testing.T, base, key string) (cookie, csrf string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"key": key})
	req, _ := http.NewRequest("POST", base+"/ui/login", bytes.NewReader(body))
	req.Header.Set("Origin", base)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sess struct{ CSRF string }
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(b, &sess) != nil || sess.CSRF == "" {
		t.Fatalf("console login: %d %s", resp.StatusCode, b)
	}
	return strings.Split(resp.Header.Get("Set-Cookie"), ";")[0], sess.CSRF
}

// consolePost sends a POST of the console's session.
func consolePost(t *testing.T, base, path, cookie, origin, csrf, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
	req.Header.Set("Cookie", cookie)
	req.Header.Set("Origin", origin)
	req.Header.Set("Content-Type", "application/json")
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
