package mcp_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/driver/native"
	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// nativeSupervisor is a supervisor on the real native driver, or skips
// (fails under AIRLOCK_TEST_REQUIRE) where this host cannot run sandboxes.
func nativeSupervisor(t *testing.T) (*supervisor.Supervisor, *store.Store) {
	t.Helper()
	cg := "cgroupv1"
	if hostcap.CgroupMode() == "v2" {
		cg = "cgroupv2"
	}
	testcap.Require(t, "root", "userns", cg, "seccomp", "landlock")
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	drv, err := native.New(native.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.OpenLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{drv.Name(): drv}, Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Close(context.Background()) })
	return sup, st
}

// TestNative drives every tool through the Go SDK client (in-memory
// transport) against real sandboxes of the native driver, with the Local
// backend (the supervisor in this process).
func TestNative(t *testing.T) {
	sup, _ := nativeSupervisor(t)
	exercise(t, sup, "k1", &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}})
}

// TestNativeRemote does the same with the Remote backend: the tools reach
// the daemon's HTTP API through the Go SDK in client/.
func TestNativeRemote(t *testing.T) {
	sup, st := nativeSupervisor(t)
	k, secret, err := st.NewKey("test", store.RoleAgent, store.Quota{}, store.RateLimits{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Supervisor: sup, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	c, err := client.New(ts.URL, string(secret))
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, sup, k.ID, &mcp.Remote{C: c})
}

// exercise calls every tool of a server on b and checks what they did;
// sup runs the sandboxes for the key keyID.
func exercise(t *testing.T, sup *supervisor.Supervisor, keyID string, b mcp.Backend) {
	srv := newServer(t, b)
	cs := connect(t, srv)

	res, text, sc := call(t, cs, "run_code", map[string]any{"code": "import os\nprint(6*7, os.getcwd(), os.environ['FOO'])", "env": map[string]any{"FOO": "bar"}})
	if res.IsError || sc["stdout"] != "42 /workspace bar\n" || sc["exit_code"] != float64(0) {
		t.Fatalf("run_code: %v\n%s", sc, text)
	}
	id := sc["sandbox_id"].(string)
	if live := sup.LiveIDs(); len(live) != 1 || live[0] != id {
		t.Fatalf("live sandboxes %v, want the session's %s", live, id)
	}

	t.Run("commands", func(t *testing.T) {
		_, _, sc := call(t, cs, "run_code", map[string]any{"code": "echo $0; echo err >&2; exit 4", "language": "bash"})
		if sc["stdout"] != "bash\n" || sc["stderr"] != "err\n" || sc["exit_code"] != float64(4) {
			t.Errorf("bash: %v", sc)
		}
		res, _, sc := call(t, cs, "run_command", map[string]any{"command": "pwd; cat", "cwd": "/tmp", "stdin": "from stdin"})
		if res.IsError || sc["stdout"] != "/tmp\nfrom stdin" {
			t.Errorf("run_command: %v", sc)
		}
		_, _, sc = call(t, cs, "run_command", map[string]any{"command": "printf", "args": []any{"%s-%s", "a b", "c"}})
		if sc["stdout"] != "a b-c" {
			t.Errorf("args: %v", sc)
		}
		_, _, sc = call(t, cs, "execute", map[string]any{"command": "echo hi"})
		_, _, sc2 := call(t, cs, "execute_code", map[string]any{"code": "print('py')"})
		_, _, sc3 := call(t, cs, "run_python_code", map[string]any{"python_code": "print(n * 2)", "global_variables": map[string]any{"n": 21}})
		if sc["stdout"] != "hi\n" || sc2["stdout"] != "py\n" || sc3["stdout"] != "42\n" {
			t.Errorf("aliases: %v %v %v", sc, sc2, sc3)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res, text, sc := call(t, cs, "run_command", map[string]any{"command": "echo started; sleep 30", "timeout_s": 1})
		if !res.IsError || sc["reason"] != "timeout" || sc["stdout"] != "started\n" || !strings.Contains(text, "stopped: timeout") || time.Since(start) > 10*time.Second {
			t.Errorf("timeout: %v\n%s", sc, text)
		}
	})

	t.Run("background", func(t *testing.T) {
		_, text, sc := call(t, cs, "run_command", map[string]any{"command": "read line; echo got $line; sleep 0.2", "background": true})
		pid, _ := sc["pid"].(string)
		if pid == "" || sc["running"] != true {
			t.Fatalf("background: %v %s", sc, text)
		}
		if res, text, _ := call(t, cs, "process_send_input", map[string]any{"pid": pid, "data": "hello\n"}); res.IsError {
			t.Fatal(text)
		}
		_, text, sc = call(t, cs, "process_wait", map[string]any{"pid": pid, "timeout_s": 10})
		if sc["stdout"] != "got hello\n" || sc["exit_code"] != float64(0) {
			t.Errorf("process_wait: %v\n%s", sc, text)
		}
		_, _, sc = call(t, cs, "run_command", map[string]any{"command": "sleep 60", "background": true})
		sleeper := sc["pid"].(string)
		_, _, sc = call(t, cs, "process_list", nil)
		if ps, _ := sc["processes"].([]any); len(ps) != 2 {
			t.Errorf("process_list: %v", sc)
		}
		if res, text, _ := call(t, cs, "process_kill", map[string]any{"pid": sleeper}); res.IsError {
			t.Fatal(text)
		}
		_, _, sc = call(t, cs, "process_wait", map[string]any{"pid": sleeper, "timeout_s": 10})
		if sc["reason"] != "killed" {
			t.Errorf("killed process: %v", sc)
		}
		// The output so far, then only what is new.
		_, _, sc = call(t, cs, "run_command", map[string]any{"command": "echo one; read x; echo two; sleep 30", "background": true})
		talker := sc["pid"].(string)
		_, text, sc = call(t, cs, "process_output", map[string]any{"pid": talker, "wait_s": 10})
		if sc["stdout"] != "one\n" || sc["running"] != true || sc["next_stdout_offset"] != float64(4) || !strings.Contains(text, "stdout_offset=4") {
			t.Errorf("process_output: %v\n%s", sc, text)
		}
		call(t, cs, "process_send_input", map[string]any{"pid": talker, "data": "go\n"})
		_, text, sc = call(t, cs, "process_output", map[string]any{"pid": talker, "stdout_offset": 4, "wait_s": 10})
		if sc["stdout"] != "two\n" || sc["stdout_offset"] != float64(4) {
			t.Errorf("process_output from an offset: %v\n%s", sc, text)
		}
		call(t, cs, "process_kill", map[string]any{"pid": talker})
	})

	t.Run("terminal", func(t *testing.T) {
		_, text, sc := call(t, cs, "run_command", map[string]any{"command": "python3", "args": []string{"-i", "-q"}, "pty": true, "background": true})
		pid, _ := sc["pid"].(string)
		if pid == "" {
			t.Fatalf("start on a terminal: %s", text)
		}
		call(t, cs, "process_send_input", map[string]any{"pid": pid, "data": "6*7\n"})
		var screen string
		off := float64(0)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !strings.Contains(screen, "\r\n42\r\n"); {
			_, _, sc = call(t, cs, "process_output", map[string]any{"pid": pid, "stdout_offset": off, "wait_s": 2})
			screen += sc["stdout"].(string)
			off = sc["next_stdout_offset"].(float64)
		}
		if !strings.Contains(screen, "\r\n42\r\n") {
			t.Fatalf("the terminal showed %q", screen)
		}
		call(t, cs, "process_send_input", map[string]any{"pid": pid, "data": "exit(5)\n"})
		_, text, sc = call(t, cs, "process_wait", map[string]any{"pid": pid, "timeout_s": 10})
		if sc["exit_code"] != float64(5) {
			t.Errorf("exit(5) on a terminal: %v\n%s", sc, text)
		}
	})

	t.Run("files", func(t *testing.T) {
		steps := []struct {
			tool string
			args map[string]any
		}{
			{"write_file", map[string]any{"path": "proj/main.py", "content": "print('one')\n# TODO fix\n"}},
			{"edit_file", map[string]any{"path": "proj/main.py", "old_string": "one", "new_string": "two"}},
			{"create_directory", map[string]any{"path": "/workspace/proj/sub/deep"}},
			{"write_file", map[string]any{"path": "proj/sub/x.txt", "content": "TODO later\n"}},
			{"move_file", map[string]any{"source": "proj/sub/x.txt", "destination": "proj/sub/deep/y.txt"}},
		}
		for _, s := range steps {
			if res, text, _ := call(t, cs, s.tool, s.args); res.IsError {
				t.Fatalf("%s: %s", s.tool, text)
			}
		}
		_, _, sc := call(t, cs, "run_command", map[string]any{"command": "python3 proj/main.py"})
		if sc["stdout"] != "two\n" {
			t.Errorf("edited program printed %v", sc)
		}
		_, _, sc = call(t, cs, "read_file", map[string]any{"path": "/workspace/proj/main.py"})
		if sc["content"] != "print('two')\n# TODO fix\n" {
			t.Errorf("read_file: %v", sc)
		}
		_, _, sc = call(t, cs, "get_file_info", map[string]any{"path": "proj/sub/deep/y.txt"})
		if sc["type"] != "file" || sc["size"] != float64(11) {
			t.Errorf("get_file_info: %v", sc)
		}
		_, _, sc = call(t, cs, "list_directory", map[string]any{"path": "proj", "depth": 3})
		if es, _ := sc["entries"].([]any); len(es) != 4 || es[3].(map[string]any)["path"] != "/workspace/proj/sub/deep/y.txt" {
			t.Errorf("list_directory: %v", sc)
		}
		_, _, sc = call(t, cs, "glob", map[string]any{"pattern": "**/*.txt"})
		if m, _ := sc["matches"].([]any); len(m) != 1 || m[0] != "/workspace/proj/sub/deep/y.txt" {
			t.Errorf("glob: %v", sc)
		}
		_, text, sc := call(t, cs, "grep", map[string]any{"pattern": "TODO", "path": "proj"})
		if m, _ := sc["matches"].([]any); len(m) != 2 || !strings.Contains(text, "proj/main.py:2:# TODO fix") {
			t.Errorf("grep: %v\n%s", sc, text)
		}
		_, _, sc = call(t, cs, "grep", map[string]any{"pattern": "t.d.", "regex": true, "ignore_case": true, "glob": "*.txt", "path": "proj"})
		if m, _ := sc["matches"].([]any); len(m) != 1 {
			t.Errorf("grep regex: %v", sc)
		}
		if res, text, _ := call(t, cs, "delete", map[string]any{"path": "proj", "recursive": true}); res.IsError {
			t.Fatal(text)
		}
		if res, text, _ := call(t, cs, "read_file", map[string]any{"path": "proj/main.py"}); !res.IsError || !strings.Contains(text, "no such file") {
			t.Errorf("read after delete: %s", text)
		}
		if res, text, _ := call(t, cs, "read_file", map[string]any{"path": "../../etc/shadow"}); !res.IsError && strings.Contains(text, "root:") {
			t.Errorf("read outside the sandbox root: %s", text)
		}
	})

	t.Run("lifecycle", func(t *testing.T) {
		_, _, sc := call(t, cs, "sandbox_create", map[string]any{"timeout_s": 60})
		other := sc["sandbox_id"].(string)
		_, _, sc = call(t, cs, "run_code", map[string]any{"code": "print('elsewhere')", "sandbox_id": other})
		if sc["sandbox_id"] != other || sc["stdout"] != "elsewhere\n" {
			t.Errorf("explicit sandbox: %v", sc)
		}
		_, _, sc = call(t, cs, "sandbox_list", nil)
		if l, _ := sc["sandboxes"].([]any); len(l) != 2 {
			t.Errorf("sandbox_list: %v", sc)
		}
		_, _, sc = call(t, cs, "sandbox_set_timeout", map[string]any{"timeout_s": 120, "sandbox_id": other})
		if exp, _ := time.Parse(time.RFC3339, sc["expires_at"].(string)); time.Until(exp) < 100*time.Second {
			t.Errorf("sandbox_set_timeout: %v", sc)
		}
		if res, text, _ := call(t, cs, "sandbox_kill", map[string]any{"sandbox_id": other}); res.IsError {
			t.Fatal(text)
		}
		if res, text, _ := call(t, cs, "run_code", map[string]any{"code": "1", "sandbox_id": other}); !res.IsError || !strings.Contains(text, "destroyed") {
			t.Errorf("run in a killed sandbox: %s", text)
		}
		if res, text, _ := call(t, cs, "run_code", map[string]any{"code": "1", "sandbox_id": "sb-nope"}); !res.IsError || !strings.Contains(text, "not found") {
			t.Errorf("unknown sandbox: %s", text)
		}
	})

	t.Run("snapshots", func(t *testing.T) {
		exerciseSnapshots(t, cs, id)
	})

	// Another caller cannot reach this session's sandbox.
	other := connect(t, newServer(t, &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k2"}}))
	if res, text, _ := call(t, other, "run_code", map[string]any{"code": "1", "sandbox_id": id}); !res.IsError || !strings.Contains(text, "another key") {
		t.Errorf("another key ran in %s: %s", id, text)
	}

	// The session's end destroys its sandbox.
	_ = cs.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		in, err := sup.Get(context.Background(), supervisor.Caller{KeyID: keyID}, id)
		if err == nil && in.State == store.StateDestroyed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's sandbox is %v after the session ended (%v)", in.State, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLimits: the Local backend (stdio MCP, and /mcp in the daemon) is
// held to the caller's rate limits by the supervisor, and a refusal tells
// the agent when to retry, as Retry-After does over HTTP.
func TestLimits(t *testing.T) {
	sup, _ := nativeSupervisor(t)
	b := &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1", Rate: store.RateLimits{ExecsPerSecond: 0.2, ExecBurst: 1}}}
	cs := connect(t, newServer(t, b))
	if res, text, _ := call(t, cs, "run_command", map[string]any{"command": "true"}); res.IsError {
		t.Fatalf("first exec: %s", text)
	}
	res, text, _ := call(t, cs, "run_command", map[string]any{"command": "true"})
	if !res.IsError || !strings.Contains(text, "too many execs") || !strings.Contains(text, "retry after 5s") {
		t.Fatalf("second exec at 0.2/s, burst 1: error %v, %q", res.IsError, text)
	}
}

// TestEnvValidated: the Local backend refuses an environment variable
// name holding '=' or NUL, as the API does, instead of turning it into
// another variable ({"A=B": "C"} set A to "B=C"). The tools check too;
// this is the backend's own check, for every caller of it.
func TestEnvValidated(t *testing.T) {
	sup, _ := nativeSupervisor(t)
	ctx := context.Background()
	b := &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "k1"}}
	if _, err := b.Create(ctx, mcp.CreateRequest{Env: map[string]string{"A=B": "C"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("create with env name A=B: %v", err)
	}
	sb, err := b.Create(ctx, mcp.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []map[string]string{{"A=B": "C"}, {"": "x"}, {"A\x00": "x"}, {"A": "x\x00y"}} {
		r, err := b.Exec(ctx, sb.ID, mcp.ExecRequest{Argv: []string{"sh", "-c", "echo \"A=$A\""}, Env: env})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "environment variable") {
			t.Errorf("env %q: %q, %v", env, r.Stdout, err)
		}
		if _, err := b.Start(ctx, sb.ID, mcp.ExecRequest{Argv: []string{"true"}, Env: env}, false); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("start with env %q: %v", env, err)
		}
	}
	r, err := b.Exec(ctx, sb.ID, mcp.ExecRequest{Argv: []string{"sh", "-c", "echo \"A=$A\""}, Env: map[string]string{"A": "B=C"}})
	if err != nil || string(r.Stdout) != "A=B=C\n" {
		t.Fatalf("a value holding '=': %q, %v", r.Stdout, err)
	}
}
