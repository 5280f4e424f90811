package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api/webtest"
)

// TestConsoleInChromium is the operator console's end-to-end test: a real
// `airlock serve` runs sandboxes of two agent keys (one holds 96 MiB, talks
// to a host through the egress proxy and sends a request whose Host is a
// script; one has a file whose name is markup), and headless Chromium
// (internal/api/webtest/console.mjs) logs in as an operator, checks each
// view against that, finds the sandbox that uses the most memory, reads
// what it ran and where it connected, and kills it; extends another; makes
// and revokes a key. The test then checks through the API that the page's
// actions took effect, breaks the audit log's chain by hand and has the
// page name the broken line. Screenshots of each view are written to the
// test's artifact directory (go test -artifacts keeps them).
func TestConsoleInChromium(t *testing.T) {
	requireE2E(t)
	webDir := webtest.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The host the heavy sandbox may reach.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strings.Repeat("upstream says hello\n", 50))
	})}
	go upstream.Serve(ln)
	defer upstream.Close()
	addr := ln.Addr().String()

	state := filepath.Join(t.TempDir(), "state")
	keyOf := func(role, name string) string {
		o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", state, "--role", role, "--name", name}})
		if o.code != 0 {
			t.Fatalf("keys create: %d %s", o.code, o.stderr)
		}
		return strings.TrimSpace(o.stdout)
	}
	opSecret, agentSecret, otherSecret := keyOf("operator", "ops"), keyOf("agent", "agent one"), keyOf("agent", "agent two")
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(`
[[template]]
name = "default"
[[template]]
name = "net"
[template.network]
mode = "egress"
allow_addresses = ["`+addr+`"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, "--config", cfg)
	op, _ := client.New(d.url, opSecret)
	agent, _ := client.New(d.url, agentSecret)
	other, _ := client.New(d.url, otherSecret)
	keys, err := op.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyID := map[string]string{}
	for _, k := range keys {
		keyID[k.Name] = k.ID
	}

	create := func(c *client.Client, template string) string {
		t.Helper()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Template: template, TTL: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	run := func(c *client.Client, id string, req client.ExecRequest) string {
		t.Helper()
		r, err := c.Exec(ctx, id, req)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec %v in %s: %+v %v", req.Argv, id, r, err)
		}
		return string(r.Stdout)
	}
	noProxyOff := map[string]string{"NO_PROXY": "", "no_proxy": ""}
	heavy := create(agent, "net")
	run(agent, heavy, client.ExecRequest{Argv: []string{"echo", "<img src=x onerror=alert(1)>", "\u202egnp.exe"}})
	if out := run(agent, heavy, client.ExecRequest{Argv: []string{"curl", "-sS", "http://" + addr + "/"}, Env: noProxyOff}); !strings.HasPrefix(out, "upstream says hello") {
		t.Fatalf("curl through the proxy: %q", out)
	}
	// A request whose Host header is markup: the proxy refuses it and the
	// audit log records the host as it came.
	run(agent, heavy, client.ExecRequest{Language: "python", Code: `import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET / HTTP/1.1\r\nHost: <img src=x onerror=alert('host')>\r\nConnection: close\r\n\r\n")
print(s.recv(4096)[:60])`})
	if _, err := agent.StartProcess(ctx, heavy, client.StartProcessRequest{ExecRequest: client.ExecRequest{Language: "python",
		Code: "import time\nx = bytearray(96 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('held', flush=True)\ntime.sleep(600)"}}); err != nil {
		t.Fatal(err)
	}
	files := create(agent, "")
	run(agent, files, client.ExecRequest{Argv: []string{"sh", "-c", `touch "/workspace/<img src=x onerror=alert('file')>" && mkdir /workspace/dir && printf 'hi\n' > /workspace/dir/a.txt`}})
	run(agent, files, client.ExecRequest{Language: "python", Code: `print("<script>alert('audit')</script>")`})
	otherSandbox := create(other, "")
	run(other, otherSandbox, client.ExecRequest{Argv: []string{"true"}})
	for i := range 6 { // more than two pages of 25 lines in the log
		run(other, otherSandbox, client.ExecRequest{Argv: []string{"echo", fmt.Sprint(i)}})
	}
	destroyed := create(agent, "")
	if err := agent.DeleteSandbox(ctx, destroyed); err != nil {
		t.Fatal(err)
	}
	// The heavy sandbox holds its 96 MiB before the page looks (and the SDK
	// reads it too).
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		u, err := agent.SandboxUsage(ctx, heavy)
		if err != nil {
			t.Fatal(err)
		}
		if u.MemoryBytes >= 96<<20 && u.MemoryLimitBytes > u.MemoryBytes && u.CPUMS > 0 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the heavy sandbox's usage: %+v", u)
		}
	}

	out := t.ArtifactDir()
	plan, _ := json.Marshal(map[string]any{
		"live": []string{heavy, files, otherSandbox}, "destroyed": destroyed, "heavy": heavy, "heavyExecs": 3,
		"allowedHost": addr, "files": files, "fileContent": "hi\n", "extend": files,
		"otherKey": keyID["agent two"], "otherSandbox": otherSandbox,
	})
	res, err := webtest.Run(t, webDir, 2*time.Minute, "console.mjs", d.url, opSecret, agentSecret, out, string(plan))
	if err != nil {
		t.Fatalf("the browser run failed: %v", err)
	}
	var result struct {
		Killed, Extended, CreatedKey, CreatedSecret, RevokedKey string
	}
	if i := strings.LastIndex(res, "RESULT "); i < 0 || json.Unmarshal([]byte(strings.TrimSpace(res[i+7:])), &result) != nil {
		t.Fatalf("no result from the browser: %s", res)
	}

	// What the page did took effect.
	sb, err := op.GetSandbox(ctx, heavy)
	if err != nil || result.Killed != heavy || sb.State != client.StateDestroyed || sb.EndReason != "deleted" {
		t.Fatalf("the killed sandbox: %+v %v (page killed %q)", sb, err, result.Killed)
	}
	sb, err = op.GetSandbox(ctx, files)
	if left := time.Until(sb.ExpiresAt); err != nil || result.Extended != files || left < 55*time.Minute || left > time.Hour {
		t.Fatalf("the extended sandbox expires in %v (%v)", time.Until(sb.ExpiresAt), err)
	}
	if sb, err := op.GetSandbox(ctx, otherSandbox); err != nil || sb.State != client.StateRunning {
		t.Fatalf("a sandbox the page did not touch: %+v %v", sb, err)
	}
	revoked, _ := client.New(d.url, result.CreatedSecret)
	var ce *client.Error
	if _, err := revoked.ListSandboxes(ctx, client.ListOptions{}); !errors.As(err, &ce) || ce.Status != 401 || result.RevokedKey == "" {
		t.Fatalf("the key made and revoked on the page still works: %v", err)
	}
	auditLog, err := os.ReadFile(filepath.Join(state, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(auditLog, []byte(`"sandbox":"`+heavy+`","reason":"deleted: deleted by operator key `+keyID["ops"]+`"`)) {
		t.Fatalf("the audit log does not say the operator killed %s", heavy)
	}
	// Egress decisions are recorded with the sandbox's owner, outcome and
	// bytes.
	egressSeen := false
	for _, line := range bytes.Split(auditLog, []byte("\n")) {
		if bytes.Contains(line, []byte(`"kind":"egress","key":"`+keyID["agent one"]+`","sandbox":"`+heavy+`",`)) &&
			bytes.Contains(line, []byte(`"host":"127.0.0.1"`)) && bytes.Contains(line, []byte(`"decision":"allow"`)) &&
			bytes.Contains(line, []byte(`"bytes_received":`)) {
			egressSeen = true
		}
	}
	if !egressSeen {
		t.Fatalf("the audit log's egress events lack the owner, outcome or bytes:\n%s", auditLog)
	}
	for _, name := range []string{"login-refused", "sandboxes", "sandboxes-destroyed", "sandbox", "sandbox-killed", "sandbox-files", "approvals", "audit", "audit-filtered", "keys"} {
		if fi, err := os.Stat(filepath.Join(out, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}

	// Break the chain: edit the other key's exec on disk; the page names
	// its line.
	lines := bytes.SplitAfter(auditLog, []byte("\n"))
	var line int
	var off int64
	for i, l := range lines {
		if bytes.Contains(l, []byte(`"kind":"exec"`)) && bytes.Contains(l, []byte(`"argv":["true"]`)) {
			line = i + 1
			off += int64(bytes.Index(l, []byte(`"argv":["true"]`)) + len(`"argv":["`))
			break
		}
		off += int64(len(l))
	}
	if line == 0 {
		t.Fatal("the other key's exec is not in the audit log")
	}
	f, err := os.OpenFile(filepath.Join(state, "audit.log"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tru3"), off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	broken, _ := json.Marshal(map[string]any{"mode": "broken", "line": line})
	if _, err := webtest.Run(t, webDir, time.Minute, "console.mjs", d.url, opSecret, agentSecret, out, string(broken)); err != nil {
		t.Fatalf("the page does not report the broken chain at line %d: %v", line, err)
	}
	t.Logf("screenshots: %s", out)
}
