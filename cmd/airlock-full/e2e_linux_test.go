package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lastLineOf is the last non-empty line of s.
func lastLineOf(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestE2EExitCodes(t *testing.T) {
	requireE2E(t)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		// wantStderr is the start of stderr's last line; "" means stderr is empty.
		wantStderr string
	}{
		{name: "true", args: []string{"--", "true"}, wantCode: 0},
		{name: "exit 3", args: []string{"--", "sh", "-c", "exit 3"}, wantCode: 3},
		{name: "exit 255", args: []string{"--", "sh", "-c", "exit 255"}, wantCode: 255},
		{name: "output streams", args: []string{"--", "sh", "-c", "echo out; echo err >&2; exit 1"}, wantCode: 1, wantStdout: "out\n", wantStderr: "err"},
		{name: "not found", args: []string{"--", "airlock-no-such-command"}, wantCode: 127, wantStderr: "airlock: airlock-no-such-command: command not found in the sandbox"},
		{name: "not found by path", args: []string{"--", "/no/such/file"}, wantCode: 127, wantStderr: "airlock: /no/such/file: not found"},
		{name: "not executable", args: []string{"--", "/etc/hostname"}, wantCode: 126, wantStderr: "airlock: /etc/hostname: cannot be executed"},
		{name: "a directory", args: []string{"--", "/usr"}, wantCode: 126, wantStderr: "airlock: /usr: cannot be executed"},
		{name: "killed by its own signal", args: []string{"--", "sh", "-c", "kill -TERM $$"}, wantCode: 143, wantStderr: "airlock: the command was ended by SIGTERM"},
		{name: "missing working directory", args: []string{"--workdir", "/nonexistent", "--", "true"}, wantCode: 126, wantStderr: "airlock: working directory /nonexistent does not exist"},
		{name: "bad flag", args: []string{"--bogus", "--", "true"}, wantCode: 125, wantStderr: "airlock: unknown flag: --bogus"},
		{name: "memory 0", args: []string{"--memory", "0", "--", "true"}, wantCode: 125, wantStderr: "airlock: --memory \"0\": give a positive size"},
		{name: "no command", args: []string{}, wantCode: 125, wantStderr: "airlock: requires at least 1 arg"},
		{name: "missing mount source", args: []string{"--mount", "/nonexistent-airlock-test:/mnt/data", "--", "true"}, wantCode: 125, wantStderr: "airlock: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := airlockRun(t, runArgs(tt.args...))
			if o.code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", o.code, tt.wantCode, o.stderr)
			}
			if o.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", o.stdout, tt.wantStdout)
			}
			if tt.wantStderr == "" {
				if o.stderr != "" {
					t.Errorf("stderr = %q, want nothing", o.stderr)
				}
				return
			}
			if !strings.HasPrefix(lastLineOf(o.stderr), tt.wantStderr) {
				t.Errorf("stderr's last line %q does not start with %q", lastLineOf(o.stderr), tt.wantStderr)
			}
			if strings.HasPrefix(tt.wantStderr, "airlock: ") && strings.Count(o.stderr, "airlock: ") != 1 {
				t.Errorf("stderr has not exactly one airlock line: %q", o.stderr)
			}
		})
	}
}

func TestE2ETimeout(t *testing.T) {
	requireE2E(t)
	o := airlockRun(t, runArgs("--timeout", "1s", "--", "sleep", "5"))
	if o.code != 137 {
		t.Errorf("exit code %d, want 137", o.code)
	}
	if !strings.HasPrefix(lastLineOf(o.stderr), "airlock: timed out") {
		t.Errorf("stderr's last line = %q, want it to start with \"airlock: timed out\"", lastLineOf(o.stderr))
	}
	// Exit 137 with the timeout line already says the kill came before
	// sleep's end; the time says it did not come early. (No upper bound:
	// a loaded host makes sandbox setup and teardown slow.)
	if o.took < time.Second {
		t.Errorf("took %v for a 1 s timeout", o.took)
	}
}

func TestE2EStdin(t *testing.T) {
	requireE2E(t)
	t.Run("passthrough", func(t *testing.T) {
		inv := runArgs("--", "cat")
		inv.stdin = strings.NewReader("hi\n")
		if o := airlockRun(t, inv); o.code != 0 || o.stdout != "hi\n" {
			t.Errorf("cat = %d %q (stderr %q), want hi", o.code, o.stdout, o.stderr)
		}
	})
	t.Run("large", func(t *testing.T) {
		inv := runArgs("--", "wc", "-c")
		inv.stdin = bytes.NewReader(bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1 MiB
		if o := airlockRun(t, inv); o.code != 0 || strings.TrimSpace(o.stdout) != "1048576" {
			t.Errorf("wc -c = %d %q (stderr %q), want 1048576", o.code, o.stdout, o.stderr)
		}
	})
	t.Run("a pipe, not a terminal", func(t *testing.T) {
		for _, stdin := range []*strings.Reader{strings.NewReader("x"), nil} {
			inv := runArgs("--", "sh", "-c", "[ -p /dev/stdin ] && ! [ -t 0 ] && echo pipe")
			if stdin != nil {
				inv.stdin = stdin
			}
			if o := airlockRun(t, inv); o.code != 0 || o.stdout != "pipe\n" {
				t.Errorf("stdin test = %d %q (stderr %q)", o.code, o.stdout, o.stderr)
			}
		}
	})
}

func TestE2EEnv(t *testing.T) {
	requireE2E(t)
	inv := runArgs("--env", "FOO=bar baz", "--env", "AIRLOCK_E2E_COPY", "-e", "AIRLOCK_E2E_UNSET", "--env", "LANG=C", "--", "env")
	inv.env = []string{"AIRLOCK_E2E_COPY=copied", "AIRLOCK_E2E_CANARY=secret-canary"}
	o := airlockRun(t, inv)
	if o.code != 0 {
		t.Fatalf("env: %d %q", o.code, o.stderr)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	for k, want := range map[string]string{
		"FOO": "bar baz", "AIRLOCK_E2E_COPY": "copied", "LANG": "C",
		"HOME": "/workspace", "PATH": "/usr/local/bin:/usr/bin:/bin",
	} {
		if vars[k] != want {
			t.Errorf("%s=%q inside, want %q", k, vars[k], want)
		}
	}
	for _, k := range []string{"AIRLOCK_E2E_CANARY", "AIRLOCK_E2E_UNSET", "AIRLOCK_AGENT", "GOPATH", "PWD"} {
		if v, ok := vars[k]; ok {
			t.Errorf("%s=%q leaked into the sandbox", k, v)
		}
	}
	if strings.Contains(o.stdout, "secret-canary") {
		t.Error("the caller's canary value is visible inside")
	}
}

func TestE2EWorkdir(t *testing.T) {
	requireE2E(t)
	if o := airlockRun(t, runArgs("--workdir", "/tmp", "--", "pwd")); o.code != 0 || o.stdout != "/tmp\n" {
		t.Errorf("--workdir /tmp: pwd = %d %q %q", o.code, o.stdout, o.stderr)
	}
	if o := airlockRun(t, runArgs("-w", "/tmp", "--", "pwd")); o.code != 0 || o.stdout != "/tmp\n" {
		t.Errorf("-w /tmp: pwd = %d %q %q", o.code, o.stdout, o.stderr)
	}
	if o := airlockRun(t, runArgs("--", "pwd")); o.code != 0 || o.stdout != "/workspace\n" {
		t.Errorf("default: pwd = %d %q %q", o.code, o.stdout, o.stderr)
	}
}

// jsonOutcome runs airlock with --json and decodes the one object it prints.
func jsonOutcome(t *testing.T, inv invocation) (outcomeOf, map[string]any) {
	t.Helper()
	inv.args = append([]string{"run", "--json"}, inv.args[1:]...)
	o := airlockRun(t, inv)
	dec := json.NewDecoder(strings.NewReader(o.stdout))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout is not JSON: %v: %q (stderr %q)", err, o.stdout, o.stderr)
	}
	if dec.More() {
		t.Errorf("more than one JSON value: %q", o.stdout)
	}
	if o.stderr != "" {
		t.Errorf("--json wrote to stderr: %q", o.stderr)
	}
	return o, m
}

// checkContract checks that m has every field of the --json contract, with its type.
func checkContract(t *testing.T, m map[string]any) {
	t.Helper()
	isNumber := func(v any) bool { _, ok := v.(json.Number); return ok }
	isString := func(v any) bool { _, ok := v.(string); return ok }
	isBool := func(v any) bool { _, ok := v.(bool); return ok }
	fields := map[string]func(any) bool{
		"exit_code":        isNumber,
		"signal":           func(v any) bool { return v == nil || isString(v) },
		"reason":           isString,
		"limits_hit":       func(v any) bool { _, ok := v.([]any); return ok },
		"message":          isString,
		"stdout":           isString,
		"stderr":           isString,
		"stdout_encoding":  func(v any) bool { return v == "utf-8" || v == "base64" },
		"stderr_encoding":  func(v any) bool { return v == "utf-8" || v == "base64" },
		"stdout_truncated": isBool,
		"stderr_truncated": isBool,
		"layers":           func(v any) bool { _, ok := v.([]any); return ok },
		"usage":            func(v any) bool { _, ok := v.(map[string]any); return ok },
	}
	for k, ok := range fields {
		v, present := m[k]
		if !present {
			t.Errorf("field %q missing", k)
			continue
		}
		if !ok(v) {
			t.Errorf("field %q = %#v has the wrong type", k, v)
		}
	}
	for k := range m {
		if _, known := fields[k]; !known {
			t.Errorf("unexpected field %q", k)
		}
	}
	if u, ok := m["usage"].(map[string]any); ok {
		for _, k := range []string{"wall_ms", "cpu_ms", "memory_peak_bytes", "bytes_written"} {
			n, ok := u[k].(json.Number)
			if !ok {
				t.Errorf("usage.%s = %#v, want a number", k, u[k])
				continue
			}
			if i, err := n.Int64(); err != nil || i < 0 {
				t.Errorf("usage.%s = %s", k, n)
			}
		}
		if len(u) != 4 {
			t.Errorf("usage has %d fields: %v", len(u), u)
		}
	}
}

func TestE2EJSON(t *testing.T) {
	requireE2E(t)
	t.Run("exit", func(t *testing.T) {
		o, m := jsonOutcome(t, runArgs("--", "sh", "-c", "echo out; echo err >&2; exit 4"))
		checkContract(t, m)
		if o.code != 4 {
			t.Errorf("exit code %d, want 4", o.code)
		}
		want := map[string]any{
			"exit_code": json.Number("4"), "signal": nil, "reason": "exit", "message": "",
			"stdout": "out\n", "stderr": "err\n", "stdout_encoding": "utf-8", "stderr_encoding": "utf-8",
			"stdout_truncated": false, "stderr_truncated": false,
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%s = %#v, want %#v", k, m[k], v)
			}
		}
		if l, _ := m["limits_hit"].([]any); len(l) != 0 {
			t.Errorf("limits_hit = %v", l)
		}
		layers := map[string]bool{}
		for _, l := range m["layers"].([]any) {
			layers[fmt.Sprint(l)] = true
		}
		for _, l := range []string{"userns", "pidns", "mountns", "netns", "cgroups", "seccomp", "landlock", "no_new_privs", "capabilities"} {
			if !layers[l] {
				t.Errorf("layer %s missing from %v", l, m["layers"])
			}
		}
		if n, _ := m["usage"].(map[string]any)["bytes_written"].(json.Number).Int64(); n != 8 {
			t.Errorf("usage.bytes_written = %d, want 8", n)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		o, m := jsonOutcome(t, runArgs("--timeout", "1s", "--", "sleep", "5"))
		checkContract(t, m)
		if o.code != 137 || m["exit_code"] != json.Number("137") {
			t.Errorf("exit code %d, exit_code %v, want 137", o.code, m["exit_code"])
		}
		if m["signal"] != "SIGKILL" || m["reason"] != "timeout" {
			t.Errorf("signal %v reason %v, want SIGKILL timeout", m["signal"], m["reason"])
		}
		if l, _ := m["limits_hit"].([]any); len(l) != 1 || l[0] != "timeout" {
			t.Errorf("limits_hit = %v, want [timeout]", m["limits_hit"])
		}
		if msg, _ := m["message"].(string); !strings.HasPrefix(msg, "timed out") {
			t.Errorf("message = %q", msg)
		}
	})
	t.Run("not found", func(t *testing.T) {
		o, m := jsonOutcome(t, runArgs("--", "airlock-no-such-command"))
		checkContract(t, m)
		if o.code != 127 || m["exit_code"] != json.Number("127") {
			t.Errorf("exit code %d, exit_code %v", o.code, m["exit_code"])
		}
		if msg, _ := m["message"].(string); !strings.Contains(msg, "not found") {
			t.Errorf("message = %q", msg)
		}
	})
	t.Run("binary output", func(t *testing.T) {
		_, m := jsonOutcome(t, runArgs("--", "head", "-c", "16", "/dev/urandom"))
		checkContract(t, m)
		s, _ := m["stdout"].(string)
		var got []byte
		switch m["stdout_encoding"] {
		case "base64":
			var err error
			if got, err = base64.StdEncoding.DecodeString(s); err != nil {
				t.Fatalf("stdout is not base64: %v", err)
			}
		default:
			// 16 random bytes are valid UTF-8 about once in 10^5 runs.
			got = []byte(s)
		}
		if len(got) != 16 {
			t.Errorf("stdout decodes to %d bytes, want 16", len(got))
		}
	})
	t.Run("invalid utf-8 is base64", func(t *testing.T) {
		_, m := jsonOutcome(t, runArgs("--", "printf", `\377\376ok`))
		checkContract(t, m)
		if m["stdout_encoding"] != "base64" || m["stderr_encoding"] != "utf-8" {
			t.Fatalf("encodings %v %v", m["stdout_encoding"], m["stderr_encoding"])
		}
		got, err := base64.StdEncoding.DecodeString(m["stdout"].(string))
		if err != nil || string(got) != "\xff\xfeok" {
			t.Errorf("stdout decodes to %q, %v", got, err)
		}
	})
	t.Run("setup fails", func(t *testing.T) {
		o, m := jsonOutcome(t, runArgs("--mount", "/nonexistent-airlock-test:/mnt/data", "--", "true"))
		checkContract(t, m)
		if o.code != 125 || m["exit_code"] != json.Number("125") || m["reason"] != "error" {
			t.Errorf("exit %d, exit_code %v, reason %v, want 125 error", o.code, m["exit_code"], m["reason"])
		}
		if msg, _ := m["message"].(string); !strings.Contains(msg, "nonexistent-airlock-test") {
			t.Errorf("message %q does not name the missing path", msg)
		}
	})
	t.Run("bad flag value", func(t *testing.T) {
		o, m := jsonOutcome(t, runArgs("--memory", "0", "--", "true"))
		checkContract(t, m)
		if o.code != 125 || m["reason"] != "error" {
			t.Errorf("exit %d reason %v", o.code, m["reason"])
		}
	})
}

func TestE2EMount(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("hello from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script"), []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Others may write: the sandbox's uid is no uid of the host's.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{dir + ":/mnt/data", dir + ":/mnt/data:ro"} {
		t.Run("read-only "+strings.TrimPrefix(spec, dir), func(t *testing.T) {
			o := airlockRun(t, runArgs("--mount", spec, "--", "cat", "/mnt/data/hello"))
			if o.code != 0 || o.stdout != "hello from the host\n" {
				t.Errorf("cat = %d %q %q", o.code, o.stdout, o.stderr)
			}
			o = airlockRun(t, runArgs("--mount", spec, "--", "sh", "-c", "echo x > /mnt/data/new"))
			if o.code == 0 {
				t.Error("writing to a read-only mount succeeded")
			}
			if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
				t.Error("the write reached the host")
			}
			o = airlockRun(t, runArgs("--mount", spec, "--", "rm", "/mnt/data/hello"))
			if o.code == 0 {
				t.Error("removing from a read-only mount succeeded")
			}
		})
	}
	t.Run("not executable", func(t *testing.T) {
		o := airlockRun(t, runArgs("--mount", dir+":/mnt/data", "--", "/mnt/data/script"))
		if o.code != 126 {
			t.Errorf("exit code %d, want 126 (stderr %q)", o.code, o.stderr)
		}
		if !strings.HasPrefix(lastLineOf(o.stderr), "airlock: /mnt/data/script") {
			t.Errorf("stderr = %q", o.stderr)
		}
	})
	t.Run("read-write", func(t *testing.T) {
		o := airlockRun(t, runArgs("--mount", dir+":/mnt/data:rw", "--", "sh", "-c", "echo written > /mnt/data/new && cat /mnt/data/hello"))
		if o.code != 0 || o.stdout != "hello from the host\n" {
			t.Fatalf("write = %d %q %q", o.code, o.stdout, o.stderr)
		}
		b, err := os.ReadFile(filepath.Join(dir, "new"))
		if err != nil || string(b) != "written\n" {
			t.Errorf("host sees %q, %v", b, err)
		}
	})
	t.Run("file mount", func(t *testing.T) {
		o := airlockRun(t, runArgs("--mount", filepath.Join(dir, "hello")+":/mnt/hello.txt", "--", "cat", "/mnt/hello.txt"))
		if o.code != 0 || o.stdout != "hello from the host\n" {
			t.Errorf("cat = %d %q %q", o.code, o.stdout, o.stderr)
		}
	})
}

// processesIn lists the host's processes whose cgroup path (any
// hierarchy) is below /airlock/<id>, with their state letter.
func processesIn(id string) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(b), ":/airlock/"+id+"/") && !strings.Contains(string(b), ":/airlock/"+id+"\n") {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		out[pid] = state
	}
	return out
}

// findSleep finds the host pid of the process whose argv is exactly argv,
// and the sandbox id from its cgroup.
func findSleep(argv []string) (pid int, id string) {
	want := strings.Join(argv, "\x00") + "\x00"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || string(b) != want {
			continue
		}
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		for _, line := range strings.Split(string(cg), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && parts[1] == "pids" {
				rest, ok := strings.CutPrefix(parts[2], "/airlock/")
				if ok {
					id, _, _ = strings.Cut(rest, "/")
					return p, id
				}
			}
		}
	}
	return 0, ""
}

// TestE2EKilledAirlock kills airlock with SIGKILL while its command runs:
// nothing of the sandbox may survive, and the next airlock removes the
// cgroups the dead one left.
func TestE2EKilledAirlock(t *testing.T) {
	requireE2E(t)
	// The orphaned agent comes to this process, which reaps it, as an init
	// would; this host's PID 1 may not reap.
	subreaper(t)
	defer reapOrphans()

	// A unique argument identifies the sandbox's sleep among the host's processes.
	argv := []string{"sleep", fmt.Sprintf("100.%06d", time.Now().UnixNano()%1000000)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := airlockCmd(ctx, runArgs(append([]string{"--timeout", "60s", "--"}, argv...)...))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	var pid int
	var id string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if pid, id = findSleep(argv); pid != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox's %q never showed up on the host (airlock stderr %q)", argv, stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if id == "" {
		t.Fatalf("pid %d is in no airlock cgroup", pid)
	}
	t.Logf("sandbox %s, sleep is host pid %d", id, pid)
	if len(processesIn(id)) == 0 {
		t.Fatalf("no process found in sandbox %s's cgroups", id)
	}

	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true
	killed := time.Now()
	for {
		reapOrphans()
		left := processesIn(id)
		_, err := os.Stat("/proc/" + strconv.Itoa(pid))
		if len(left) == 0 && errors.Is(err, fs.ErrNotExist) {
			t.Logf("sandbox gone %v after the kill", time.Since(killed))
			break
		}
		if time.Since(killed) > 2*time.Second {
			t.Fatalf("2 s after airlock died, sandbox %s still has processes (pid: state) %v; its sleep %d exists: %v", id, left, pid, err == nil)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The dead airlock could not remove its cgroups; the next one does.
	stale, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id)
	t.Logf("left by the dead airlock: %v", stale)
	if o := airlockRun(t, runArgs("--", "true")); o.code != 0 {
		t.Fatalf("the next airlock run failed: %d %q", o.code, o.stderr)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id); len(left) != 0 {
		t.Errorf("stale cgroups of the killed sandbox remain: %v", left)
	}
}

func TestE2EDoctor(t *testing.T) {
	requireE2E(t)
	o := airlockRun(t, invocation{args: []string{"doctor"}})
	if o.code != 0 {
		t.Errorf("doctor exit code %d (stderr %q)", o.code, o.stderr)
	}
	for _, s := range []string{"layers", "drivers", "native"} {
		if !strings.Contains(o.stdout, s) {
			t.Errorf("doctor output lacks %q", s)
		}
	}
	o = airlockRun(t, invocation{args: []string{"doctor", "--json"}})
	if o.code != 0 {
		t.Errorf("doctor --json exit code %d (stderr %q)", o.code, o.stderr)
	}
	var r struct {
		Layers []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"layers"`
		Drivers []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"drivers"`
	}
	if err := json.Unmarshal([]byte(o.stdout), &r); err != nil {
		t.Fatalf("doctor --json is not JSON: %v: %q", err, o.stdout)
	}
	if len(r.Layers) == 0 || len(r.Drivers) == 0 {
		t.Fatalf("doctor --json has %d layers, %d drivers", len(r.Layers), len(r.Drivers))
	}
	ok := map[string]bool{}
	for _, l := range r.Layers {
		ok[l.Name] = l.OK
	}
	// This test runs only where these work, and doctor must agree.
	for _, n := range []string{"root", "userns", "cgroupv1"} {
		if !ok[n] {
			t.Errorf("doctor says layer %s is missing", n)
		}
	}
	native := false
	for _, d := range r.Drivers {
		if d.Name == "native" {
			native = true
		}
	}
	if !native {
		t.Error("doctor --json lists no native driver")
	}
}
