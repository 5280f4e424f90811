package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agentbin"
	"github.com/airlock-sandbox/airlock/internal/mcp/npmtest"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// requireMCP skips (or fails) a test that runs `airlock mcp` with real
// sandboxes.
func requireMCP(t *testing.T) {
	t.Helper()
	testcap.Require(t, "root", "userns", "cgroupv1", "seccomp", "landlock")
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// mcpEnv is the environment of an `airlock mcp` subprocess: the test's,
// with the agent named, and the daemon's variables set (remote mode) or
// emptied (embedded mode).
func mcpEnv(url, key string) []string {
	return append(os.Environ(), agentbin.Env+"="+filepath.Join(binDir, "airlock-agent"),
		client.EnvURL+"="+url, client.EnvKey+"="+key)
}

func goClient(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "airlock-test", Version: "0"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runCode calls run_code and returns its structured content.
func runCode(t *testing.T, cs *sdk.ClientSession, code string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &sc)
	if res.IsError {
		t.Fatalf("run_code %q: %v %v", code, sc, res.Content)
	}
	return sc
}

// TestMCPStdioEmbedded runs the real `airlock mcp` binary with its embedded
// supervisor and drives it with the Go SDK over stdio: code runs in a
// sandbox, and when the client leaves, the process exits having destroyed
// the session's sandbox.
func TestMCPStdioEmbedded(t *testing.T) {
	requireMCP(t)
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(binDir, "airlock"), "mcp", "--state-dir", dir)
	cmd.Env = mcpEnv("", "")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cs := goClient(t, &sdk.CommandTransport{Command: cmd})
	sc := runCode(t, cs, "import os; print(6*7, os.getuid())")
	if sc["stdout"] != "42 1000\n" {
		t.Fatalf("run_code: %v", sc)
	}
	id, _ := sc["sandbox_id"].(string)
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	// The process is gone (CommandTransport waits for it); its registry
	// says the sandbox was destroyed, and nothing of it remains on the host.
	st, err := store.Open(dir, time.Second)
	if err != nil {
		t.Fatalf("registry still held after airlock mcp ended: %v\n%s", err, stderr.String())
	}
	defer st.Close()
	rec, err := st.GetSandbox(id)
	if err != nil || rec.State != store.StateDestroyed {
		t.Fatalf("sandbox %s: %+v %v", id, rec, err)
	}
	if cg := sandboxCgroups([]string{id}); len(cg) > 0 {
		t.Errorf("cgroups left: %v", cg)
	}
}

// TestMCPRemoteAndHTTP runs `airlock serve` and reaches it two ways: `airlock
// mcp` with AIRLOCK_URL and AIRLOCK_API_KEY (stdio, through the Go SDK in
// client/), and /mcp (streamable HTTP) with the Go SDK's HTTP client. /mcp
// needs the key and refuses foreign Origins.
func TestMCPRemoteAndHTTP(t *testing.T) {
	requireMCP(t)
	dir := t.TempDir()
	key := newKey(t, dir, "agent")
	d := startDaemon(t, dir)
	api, err := client.New(d.url, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("stdio through the daemon", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binDir, "airlock"), "mcp")
		cmd.Env = mcpEnv(d.url, key)
		cs := goClient(t, &sdk.CommandTransport{Command: cmd})
		sc := runCode(t, cs, "print('remote')")
		id, _ := sc["sandbox_id"].(string)
		if sc["stdout"] != "remote\n" {
			t.Fatalf("run_code: %v", sc)
		}
		if sb, err := api.GetSandbox(ctx, id); err != nil || sb.State != client.StateRunning {
			t.Fatalf("the daemon does not run the session's sandbox %s: %+v %v", id, sb, err)
		}
		_ = cs.Close()
		if sb, err := api.GetSandbox(ctx, id); err != nil || sb.State != client.StateDestroyed {
			t.Errorf("the session's sandbox outlived airlock mcp: %+v %v", sb, err)
		}
	})

	t.Run("http", func(t *testing.T) {
		hc := &http.Client{Transport: headerTransport{"Authorization": "Bearer " + key}}
		cs := goClient(t, &sdk.StreamableClientTransport{Endpoint: d.url + "/mcp", HTTPClient: hc})
		sc := runCode(t, cs, "print('over http')")
		if sc["stdout"] != "over http\n" {
			t.Fatalf("run_code: %v", sc)
		}
		id, _ := sc["sandbox_id"].(string)
		if sb, err := api.GetSandbox(ctx, id); err != nil || sb.State != client.StateRunning {
			t.Fatalf("sandbox %s: %+v %v", id, sb, err)
		}
		_ = cs.Close() // DELETEs the session
		deadline := time.Now().Add(10 * time.Second)
		for {
			sb, err := api.GetSandbox(ctx, id)
			if err == nil && sb.State == client.StateDestroyed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the HTTP session's sandbox was not destroyed: %+v %v", sb, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`
		tests := []struct {
			name    string
			headers map[string]string
			want    int
		}{
			{"no key", map[string]string{}, http.StatusUnauthorized},
			{"wrong key", map[string]string{"Authorization": "Bearer airlock_nope"}, http.StatusUnauthorized},
			{"foreign origin", map[string]string{"Authorization": "Bearer " + key, "Origin": "http://evil.example"}, http.StatusForbidden},
			{"foreign host", map[string]string{"Authorization": "Bearer " + key, "Host": "evil.example"}, http.StatusForbidden},
			{"ok", map[string]string{"Authorization": "Bearer " + key}, http.StatusOK},
		}
		for _, tt := range tests {
			req, _ := http.NewRequest("POST", d.url+"/mcp", strings.NewReader(init))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tt.headers {
				req.Header.Set(k, v)
				if k == "Host" {
					req.Host = v
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.want)
			}
		}
	})
}

// headerTransport adds headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// tsResult is what client.mjs prints.
type tsResult struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Tools         []string `json:"tools"`
	RunCodeAnnots struct {
		ReadOnly    bool  `json:"readOnlyHint"`
		Destructive *bool `json:"destructiveHint"`
	} `json:"run_code_annotations"`
	ReadFileAnnots struct {
		ReadOnly bool `json:"readOnlyHint"`
	} `json:"read_file_annotations"`
	RunCode struct {
		IsError    bool           `json:"isError"`
		Structured map[string]any `json:"structured"`
		Text       string         `json:"text"`
	} `json:"run_code"`
	ReadFile       map[string]any `json:"read_file"`
	RunCommandFail struct {
		IsError    bool           `json:"isError"`
		Structured map[string]any `json:"structured"`
	} `json:"run_command_fail"`
	EditMissing struct {
		IsError bool   `json:"isError"`
		Text    string `json:"text"`
	} `json:"edit_missing"`
	Error string `json:"error"`
}

func runNode(t *testing.T, dir string, env []string, args ...string) tsResult {
	t.Helper()
	var r tsResult
	runClient(t, dir, "client.mjs", env, &r, args...)
	return r
}

// runClient runs the test client script of dir with args and decodes the
// JSON object it prints into r; a client that fails (or prints an error)
// fails t.
func runClient(t *testing.T, dir, script string, env []string, r any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var failed struct{ Error string }
	_ = json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &failed)
	if jerr := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), r); jerr != nil || err != nil || failed.Error != "" {
		t.Fatalf("node %s %v: %v %v\nstdout: %s\nstderr: %s", script, args, err, jerr, stdout.String(), stderr.String())
	}
}

func checkTS(t *testing.T, r tsResult) {
	t.Helper()
	for _, n := range []string{"run_code", "run_command", "read_file", "write_file", "edit_file", "grep", "glob", "sandbox_create", "process_send_input", "execute", "run_python_code"} {
		if !slices.Contains(r.Tools, n) {
			t.Errorf("tools/list lacks %s: %v", n, r.Tools)
		}
	}
	if r.Server.Name != "airlock" || r.RunCodeAnnots.ReadOnly || r.RunCodeAnnots.Destructive == nil || !*r.RunCodeAnnots.Destructive || !r.ReadFileAnnots.ReadOnly {
		t.Errorf("server %q, annotations run_code %+v read_file %+v", r.Server.Name, r.RunCodeAnnots, r.ReadFileAnnots)
	}
	if r.RunCode.IsError || r.RunCode.Structured["stdout"] != "42\n" || !strings.Contains(r.RunCode.Text, "42") {
		t.Errorf("run_code: %+v", r.RunCode)
	}
	if r.ReadFile["content"] != "one\nthree\n" {
		t.Errorf("write, edit, read: %v", r.ReadFile)
	}
	if !r.RunCommandFail.IsError || r.RunCommandFail.Structured["exit_code"] != float64(3) || r.RunCommandFail.Structured["stderr"] != "oops\n" {
		t.Errorf("failing command: %+v", r.RunCommandFail)
	}
	if !r.EditMissing.IsError || !strings.Contains(r.EditMissing.Text, "does not occur") {
		t.Errorf("edit of absent text: %+v", r.EditMissing)
	}
}

// TestMCPTypeScriptSDK drives airlock with the official TypeScript SDK
// (@modelcontextprotocol/sdk from npm): over stdio it spawns `airlock mcp`
// (embedded supervisor); over streamable HTTP it reaches /mcp of `airlock
// serve` with an API key.
func TestMCPTypeScriptSDK(t *testing.T) {
	requireMCP(t)
	dir := npmtest.Install(t)
	t.Run("stdio", func(t *testing.T) {
		r := runNode(t, dir, mcpEnv("", ""), "stdio", filepath.Join(binDir, "airlock"), "mcp", "--state-dir", t.TempDir())
		checkTS(t, r)
	})
	t.Run("http", func(t *testing.T) {
		sdir := t.TempDir()
		key := newKey(t, sdir, "agent")
		d := startDaemon(t, sdir)
		r := runNode(t, dir, append(os.Environ(), client.EnvKey+"="+key), "http", d.url+"/mcp")
		checkTS(t, r)
	})
}

// TestMCPInspector calls run_code through the MCP Inspector's CLI
// (@modelcontextprotocol/inspector 0.15.0, the last that runs on Node 20),
// which spawns `airlock mcp`.
func TestMCPInspector(t *testing.T) {
	requireMCP(t)
	dir := npmtest.Install(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", ".bin", "mcp-inspector"), "--cli",
		"-e", agentbin.Env+"="+filepath.Join(binDir, "airlock-agent"),
		filepath.Join(binDir, "airlock"), "mcp", "--state-dir", t.TempDir(),
		"--method", "tools/call", "--tool-name", "run_code", "--tool-arg", "code=print(6*7)")
	cmd.Dir = dir
	cmd.Env = mcpEnv("", "") // embedded mode, whatever the test's environment says
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("inspector output: %v\n%s", err, stdout.String())
	}
	if res.IsError || res.StructuredContent["stdout"] != "42\n" || len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "42") {
		t.Fatalf("inspector run_code: %s", stdout.String())
	}
}
