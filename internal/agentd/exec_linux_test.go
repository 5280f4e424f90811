package agentd

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agent"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	mk("a/tool", 0o755)
	mk("b/tool", 0o755)
	mk("a/data", 0o644)
	mk("b/data", 0o755)
	mk("a/secret", 0o600)
	mk("c/onlyuser", 0o700)
	mk("c/group", 0o610)
	if err := os.MkdirAll(filepath.Join(dir, "a/subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk("b/subdir", 0o755)
	if err := os.Symlink(filepath.Join(b, "tool"), filepath.Join(c, "link")); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + a + ":" + b + ":" + c

	tests := []struct {
		name     string
		cmd      string
		env      []string
		want     string
		wantCode int // 126 or 127 for a CommandError
	}{
		{name: "first match on PATH", cmd: "tool", env: []string{path}, want: filepath.Join(a, "tool")},
		{name: "PATH order", cmd: "tool", env: []string{"PATH=" + b + ":" + a}, want: filepath.Join(b, "tool")},
		{name: "not executable skipped for a later match", cmd: "data", env: []string{path}, want: filepath.Join(b, "data")},
		{name: "directory skipped", cmd: "subdir", env: []string{path}, want: filepath.Join(b, "subdir")},
		{name: "user execute bit suffices", cmd: "onlyuser", env: []string{path}, want: filepath.Join(c, "onlyuser")},
		{name: "group execute bit suffices", cmd: "group", env: []string{path}, want: filepath.Join(c, "group")},
		{name: "symlink followed", cmd: "link", env: []string{path}, want: filepath.Join(c, "link")},
		{name: "only non-executable match", cmd: "secret", env: []string{path}, wantCode: 126},
		{name: "missing", cmd: "nosuch", env: []string{path}, wantCode: 127},
		{name: "last PATH entry wins", cmd: "tool", env: []string{"PATH=" + c, "HOME=/x", "PATH=" + b}, want: filepath.Join(b, "tool")},
		{name: "other variables are not PATH", cmd: "tool", env: []string{"MYPATH=" + a, "PATH=" + b}, want: filepath.Join(b, "tool")},
		{name: "empty PATH finds nothing", cmd: "tool", env: []string{"PATH="}, wantCode: 127},
		{name: "slash: no search", cmd: "./tool", env: []string{path}, want: "./tool"},
		{name: "absolute: no search, even if missing", cmd: "/no/such/tool", env: []string{path}, want: "/no/such/tool"},
		{name: "relative with a slash", cmd: "a/tool", env: []string{"PATH=" + b}, want: "a/tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lookPath(tt.cmd, tt.env)
			if tt.wantCode != 0 {
				var ce *sandbox.CommandError
				if !errors.As(err, &ce) {
					t.Fatalf("lookPath = %q, %v, want a CommandError %d", got, err, tt.wantCode)
				}
				if ce.Code != tt.wantCode {
					t.Errorf("code = %d, want %d (%s)", ce.Code, tt.wantCode, ce.Msg)
				}
				if !strings.HasPrefix(ce.Msg, tt.cmd+": ") {
					t.Errorf("message %q does not start with the command", ce.Msg)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("lookPath = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
	t.Run("default PATH", func(t *testing.T) {
		// Without PATH the sandbox's default is searched: sh lives in /bin
		// or /usr/bin on every Linux.
		got, err := lookPath("sh", []string{"HOME=/workspace"})
		if err != nil {
			t.Fatalf("lookPath(sh): %v", err)
		}
		found := false
		for _, d := range filepath.SplitList(sandbox.DefaultPath) {
			if got == filepath.Join(d, "sh") {
				found = true
			}
		}
		if !found {
			t.Errorf("lookPath(sh) = %q, not on %s", got, sandbox.DefaultPath)
		}
		var ce *sandbox.CommandError
		_, err = lookPath("airlock-no-such-command", nil)
		if !errors.As(err, &ce) || ce.Code != 127 || !strings.Contains(ce.Msg, sandbox.DefaultPath) {
			t.Errorf("missing command = %v, want 127 naming %s", err, sandbox.DefaultPath)
		}
	})
}

func TestEngineEnv(t *testing.T) {
	defaults := []string{"PATH=" + sandbox.DefaultPath, "HOME=/workspace", "LANG=C.UTF-8", "USER=sandbox", "HOSTNAME=box"}
	tests := []struct {
		name    string
		sandbox []string
		req     []string
		tty     bool
		want    []string
	}{
		{name: "defaults", want: defaults},
		{name: "sandbox adds", sandbox: []string{"A=1"}, want: append(append([]string{}, defaults...), "A=1")},
		{name: "request adds after the sandbox", sandbox: []string{"A=1"}, req: []string{"B=2"}, want: append(append([]string{}, defaults...), "A=1", "B=2")},
		{
			name: "sandbox replaces a default in place", sandbox: []string{"LANG=de_DE.UTF-8"},
			want: []string{"PATH=" + sandbox.DefaultPath, "HOME=/workspace", "LANG=de_DE.UTF-8", "USER=sandbox", "HOSTNAME=box"},
		},
		{
			name: "request replaces the sandbox's and the default", sandbox: []string{"PATH=/opt/bin", "A=1"}, req: []string{"A=2", "PATH=/x"},
			want: []string{"PATH=/x", "HOME=/workspace", "LANG=C.UTF-8", "USER=sandbox", "HOSTNAME=box", "A=2"},
		},
		{
			name: "later entries of one list win", req: []string{"A=1", "B=1", "A=3"},
			want: append(append([]string{}, defaults...), "A=3", "B=1"),
		},
		{
			name: "empty value replaces too", req: []string{"HOME="},
			want: []string{"PATH=" + sandbox.DefaultPath, "HOME=", "LANG=C.UTF-8", "USER=sandbox", "HOSTNAME=box"},
		},
		{
			name: "value with =", req: []string{"OPTS=a=b=c"},
			want: append(append([]string{}, defaults...), "OPTS=a=b=c"),
		},
		{name: "a terminal gets TERM", tty: true, want: append(append([]string{}, defaults...), "TERM=xterm-256color")},
		{
			name: "the request's TERM replaces the terminal's", tty: true, req: []string{"TERM=vt100"},
			want: append(append([]string{}, defaults...), "TERM=vt100"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &engine{cfg: &agent.Config{Hostname: "box", Env: tt.sandbox}}
			got := e.env(tt.req, tt.tty, sandbox.Workspace)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("env =\n %q\nwant\n %q", got, tt.want)
			}
		})
	}
	t.Run("a home", func(t *testing.T) {
		e := &engine{cfg: &agent.Config{Hostname: "box", Home: "/home/user"}}
		want := []string{"PATH=" + sandbox.DefaultPath, "HOME=/home/user", "LANG=C.UTF-8", "USER=user", "HOSTNAME=box", "PWD=/home/user/src"}
		if got := e.env(nil, false, "/home/user/src"); !reflect.DeepEqual(got, want) {
			t.Errorf("env with a home =\n %q\nwant\n %q", got, want)
		}
	})
	t.Run("inputs are not modified", func(t *testing.T) {
		sb := []string{"A=1"}
		req := []string{"A=2"}
		e := &engine{cfg: &agent.Config{Env: sb}}
		_ = e.env(req, false, sandbox.Workspace)
		if sb[0] != "A=1" || req[0] != "A=2" {
			t.Errorf("env changed its inputs: %q %q", sb, req)
		}
	})
}

func TestExecError(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		dir      string
		err      error
		wantCode int
		wantMsg  string
	}{
		{"not found", dir, unix.ENOENT, 127, "prog: not found in the sandbox"},
		{"working directory missing", filepath.Join(dir, "nope"), unix.ENOENT, 126, "working directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"permission", dir, unix.EACCES, 126, "prog: cannot be executed in the sandbox"},
		{"not an executable format", dir, unix.ENOEXEC, 126, "cannot be executed"},
		{"a directory", dir, unix.EISDIR, 126, "cannot be executed"},
		{"not permitted", dir, unix.EPERM, 126, "cannot be executed"},
		{"process limit", dir, unix.EAGAIN, 126, "process limit is reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := execError("prog", tt.dir, tt.err)
			var ce *sandbox.CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("execError = %v, want a CommandError", err)
			}
			if ce.Code != tt.wantCode || !strings.Contains(ce.Msg, tt.wantMsg) {
				t.Errorf("execError = %d %q, want %d containing %q", ce.Code, ce.Msg, tt.wantCode, tt.wantMsg)
			}
		})
	}
	t.Run("other errors", func(t *testing.T) {
		err := execError("prog", dir, unix.EIO)
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			t.Errorf("EIO became a CommandError %d", ce.Code)
		}
		if !errors.Is(err, unix.EIO) || !strings.Contains(err.Error(), "start prog") {
			t.Errorf("execError = %v", err)
		}
	})
}

func TestExitOf(t *testing.T) {
	tests := []struct {
		name     string
		ws       unix.WaitStatus
		wantCode int
		wantSig  string
	}{
		{"exit 0", 0, 0, ""},
		{"exit 3", 3 << 8, 3, ""},
		{"exit 255", 255 << 8, 255, ""},
		{"SIGKILL", unix.WaitStatus(unix.SIGKILL), -1, "SIGKILL"},
		{"SIGSEGV with core", unix.WaitStatus(unix.SIGSEGV) | 0x80, -1, "SIGSEGV"},
		{"real-time signal", 34, -1, "SIG34"},
	}
	for _, tt := range tests {
		code, sig := exitOf(tt.ws)
		if code != tt.wantCode || sig != tt.wantSig {
			t.Errorf("%s: exitOf = %d %q, want %d %q", tt.name, code, sig, tt.wantCode, tt.wantSig)
		}
	}
}
