package main

import (
	"bufio"
	"bytes"
	"context"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// daemon is an `airlock serve` subprocess.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

var listenRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startDaemon runs `airlock serve` on a free port of 127.0.0.1 with the
// state directory dir, and waits until it listens.
func startDaemon(t *testing.T, dir string, extra ...string) *daemon {
	t.Helper()
	return startDaemonFrom(t, "", dir, extra...)
}

// startDaemonFrom is startDaemon with the binaries of directory bin (""
// is the test's own build).
func startDaemonFrom(t *testing.T, bin, dir string, extra ...string) *daemon {
	t.Helper()
	// The audit key beside the state directory: not in it, and not in the
	// host's /etc/airlock.
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", dir, "--audit-key", dir + ".keys/audit.key"}, extra...)
	d := &daemon{cmd: airlockCmd(context.Background(), invocation{args: args, bin: bin}), done: make(chan struct{})}
	pr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := startChild(d.cmd); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.logs.WriteString(line + "\n")
			d.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_ = d.cmd.Wait()
		forgetChild(d.cmd)
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log())
		}
		// The daemon's sandboxes outlive it: end what the test left.
		o := airlockRun(t, invocation{args: []string{"reap", "--state-dir", dir, "--audit-key", dir + ".keys/audit.key"}, bin: bin})
		if o.code != 0 {
			t.Logf("airlock reap after the test: %d %s", o.code, o.stderr)
		}
	})
	select {
	case a := <-addr:
		d.url = "http://" + a
	case <-d.done:
		t.Fatalf("airlock serve exited: %s", d.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("airlock serve did not listen: %s", d.log())
	}
	return d
}

// sandboxProcs lists the host processes that belong to any of the
// sandboxes ids, found by their cgroups.
func sandboxProcs(t *testing.T, ids []string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, id := range ids {
			if bytes.Contains(cg, []byte("/airlock/"+id+"/")) || bytes.Contains(cg, []byte("/airlock/"+id+"\n")) {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				out = append(out, e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
	}
	return out
}

// sandboxCgroups lists the cgroup directories left of the sandboxes ids.
func sandboxCgroups(ids []string) []string {
	var out []string
	for _, id := range ids {
		m, _ := filepath.Glob("/sys/fs/cgroup/*/airlock/" + id)
		out = append(out, m...)
		m, _ = filepath.Glob("/sys/fs/cgroup/airlock/" + id) // v2
		out = append(out, m...)
	}
	return out
}

func newKey(t *testing.T, dir, role string) string {
	t.Helper()
	o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", dir, "--role", role, "--name", t.Name()}})
	key := strings.TrimSpace(o.stdout)
	if o.code != 0 || !strings.HasPrefix(key, "airlock_") || strings.Contains(key, "\n") {
		t.Fatalf("keys create: %d %q %q", o.code, o.stdout, o.stderr)
	}
	return key
}

// TestSandboxCLI drives `airlock sandbox` and `airlock keys` through a
// daemon.
func TestSandboxCLI(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	opKey := newKey(t, dir, "operator")
	d := startDaemon(t, dir)
	env := []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + opKey}
	run := func(args ...string) outcomeOf {
		return airlockRun(t, invocation{args: args, env: env})
	}
	// keys create through the daemon.
	o := run("keys", "create", "--name", "agent1")
	agentKey := strings.TrimSpace(o.stdout)
	if o.code != 0 || !strings.HasPrefix(agentKey, "airlock_") {
		t.Fatalf("keys create via the daemon: %d %q %q", o.code, o.stdout, o.stderr)
	}
	env = []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + agentKey}

	o = run("sandbox", "create", "--memory", "64M", "-e", "GREETING=hello")
	id := o.stdout
	if o.code != 0 || !regexp.MustCompile(`^sb-[0-9a-f]+\n$`).MatchString(id) {
		t.Fatalf("sandbox create must print the id alone: %d %q %q", o.code, o.stdout, o.stderr)
	}
	id = strings.TrimSpace(id)
	o = run("sandbox", "exec", id, "--", "sh", "-c", "echo $GREETING; echo oops >&2; exit 7")
	if o.code != 7 || o.stdout != "hello\n" || o.stderr != "oops\n" {
		t.Fatalf("sandbox exec: %d %q %q", o.code, o.stdout, o.stderr)
	}
	o = airlockRun(t, invocation{args: []string{"sandbox", "exec", "-i", id, "--", "cat"}, env: env, stdin: strings.NewReader("piped")})
	if o.code != 0 || o.stdout != "piped" {
		t.Fatalf("sandbox exec -i: %d %q %q", o.code, o.stdout, o.stderr)
	}
	o = run("sandbox", "exec", "--timeout", "200ms", id, "--", "sleep", "5")
	if o.code != 128+9 || !strings.Contains(o.stderr, "timed out") {
		t.Fatalf("sandbox exec timeout: %d %q", o.code, o.stderr)
	}

	// cp: a file and a directory, up and down.
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "f.txt"), []byte("file body"), 0o644)
	os.MkdirAll(filepath.Join(local, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "tree", "sub", "g.txt"), []byte("deep"), 0o600)
	os.Symlink("sub/g.txt", filepath.Join(local, "tree", "link"))
	for _, args := range [][]string{
		{"sandbox", "cp", filepath.Join(local, "f.txt"), id + ":/workspace/f.txt"},
		{"sandbox", "cp", filepath.Join(local, "tree"), id + ":/workspace/tree"},
		{"sandbox", "cp", id + ":/workspace/f.txt", filepath.Join(local, "back.txt")},
		{"sandbox", "cp", id + ":/workspace/tree", filepath.Join(local, "treeback")},
	} {
		if o := run(args...); o.code != 0 {
			t.Fatalf("%v: %d %q", args, o.code, o.stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(local, "back.txt")); string(b) != "file body" {
		t.Errorf("file round trip: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(local, "treeback", "link")); string(b) != "deep" {
		t.Errorf("tree round trip through the symlink: %q", b)
	}
	if o := run("sandbox", "exec", id, "--", "cat", "/workspace/tree/sub/g.txt"); o.stdout != "deep" {
		t.Errorf("uploaded tree: %q %q", o.stdout, o.stderr)
	}
	o = run("sandbox", "cp", id+":/workspace/f.txt", "-")
	if o.stdout != "file body" {
		t.Errorf("cp to stdout: %q", o.stdout)
	}
	if o := run("sandbox", "cp", "a", "b"); o.code == 0 {
		t.Error("cp without a sandbox side succeeded")
	}

	o = run("sandbox", "ls")
	if o.code != 0 || !strings.Contains(o.stdout, id) || !strings.Contains(o.stdout, "running") {
		t.Fatalf("sandbox ls: %q %q", o.stdout, o.stderr)
	}
	if o := run("sandbox", "rm", id); o.code != 0 {
		t.Fatalf("sandbox rm: %q", o.stderr)
	}
	o = run("sandbox", "ls", "--state", "destroyed")
	if !strings.Contains(o.stdout, id) || !strings.Contains(o.stdout, "deleted") {
		t.Fatalf("ls after rm: %q", o.stdout)
	}
	o = run("sandbox", "exec", id, "--", "true")
	if o.code != cli.ExitAirlock || !strings.Contains(o.stderr, "not_running") {
		t.Fatalf("exec in a removed sandbox: %d %q", o.code, o.stderr)
	}
	// Without the environment, the CLI says what to set.
	o = airlockRun(t, invocation{args: []string{"sandbox", "ls"}, env: []string{"AIRLOCK_URL="}})
	if o.code != cli.ExitAirlock || !strings.Contains(o.stderr, "AIRLOCK_URL") {
		t.Fatalf("ls without AIRLOCK_URL: %d %q", o.code, o.stderr)
	}
}
