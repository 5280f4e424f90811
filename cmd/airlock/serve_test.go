package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/client"
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
	// The audit key beside the state directory: not in it, and not in the
	// host's /etc/airlock.
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", dir, "--audit-key", dir + ".keys/audit.key"}, extra...)
	d := &daemon{cmd: airlockCmd(context.Background(), invocation{args: args}), done: make(chan struct{})}
	pr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
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
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.log())
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

// TestServeKill9 is the fault test: kill -9 the daemon while sandboxes run
// a long exec; within seconds no process of theirs remains; the next daemon
// on the same state directory records them as lost and leaves no cgroup of
// them behind.
func TestServeKill9(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	key := newKey(t, dir, "operator")
	// The killed daemon's agents die with it and become orphans. This
	// host's init reaps orphans only after seconds, and a zombie stays in
	// its cgroup until then; as their subreaper, this process reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	// Execs may run 5 minutes (an exec may not ask for more than its
	// template's timeout).
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("[[template]]\nname = \"default\"\ntimeout = \"5m\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "--config", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(d.url, key)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 64 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	// A long foreground exec, streaming, and a background process.
	started := make(chan struct{})
	execErr := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, ids[0], client.ExecRequest{Argv: []string{"sh", "-c", "echo started; sleep 300"}, Timeout: 5 * time.Minute}, func(ev client.Event) error {
			if strings.Contains(string(ev.Data), "started") {
				close(started)
			}
			return nil
		})
		execErr <- err
	}()
	if _, err := c.StartProcess(ctx, ids[1], client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "300"}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the long exec did not start")
	}
	before := sandboxProcs(t, ids)
	if len(before) < 5 { // 3 agents, sh, sleep, sleep
		t.Fatalf("expected the sandboxes' processes on the host before the kill, found %v", before)
	}
	if cgs := sandboxCgroups(ids); len(cgs) < len(ids) {
		t.Fatalf("expected the sandboxes' cgroups before the kill, found %v", cgs)
	}

	// An offline command on the state directory fails fast while the
	// daemon holds it.
	o := airlockRun(t, invocation{args: []string{"keys", "create", "--state-dir", dir}})
	if o.code == 0 || !strings.Contains(o.stderr, "in use") || !strings.Contains(o.stderr, "AIRLOCK_URL") || o.took > 5*time.Second {
		t.Fatalf("keys create on a held state dir: code %d after %v: %s", o.code, o.took, o.stderr)
	}
	o = airlockRun(t, invocation{args: []string{"reap", "--state-dir", dir, "--audit-key", dir + ".keys/audit.key"}})
	if o.code == 0 || !strings.Contains(o.stderr, "in use") {
		t.Fatalf("reap on a held state dir: code %d: %s", o.code, o.stderr)
	}

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	deadline := time.Now().Add(5 * time.Second)
	for {
		reapOrphans()
		left := sandboxProcs(t, ids)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after kill -9 these sandbox processes remain: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-execErr; err == nil {
		t.Error("the streaming exec ended without an error when its daemon died")
	}

	d2 := startDaemon(t, dir, "--config", cfg)
	c2, _ := client.New(d2.url, key)
	for _, id := range ids {
		sb, err := c2.GetSandbox(ctx, id)
		if err != nil || sb.State != client.StateLost || sb.EndReason != "lost" || sb.EndedAt.IsZero() {
			t.Errorf("after restart %s: %+v, %v; want state lost", id, sb, err)
		}
	}
	if l, err := c2.ListSandboxes(ctx, client.ListOptions{State: client.StateRunning}); err != nil || len(l) != 0 {
		t.Errorf("running after restart: %+v, %v", l, err)
	}
	if left := sandboxCgroups(ids); len(left) != 0 {
		t.Errorf("cgroups remain after recovery: %v", left)
	}
	if !strings.Contains(d2.log(), "sandbox lost with the previous daemon") {
		t.Errorf("the recovery is not logged")
	}
	// And audited: each lost sandbox has its destroy event.
	if alog, err := os.ReadFile(filepath.Join(dir, "audit.log")); err != nil {
		t.Fatal(err)
	} else {
		for _, id := range ids {
			if !regexp.MustCompile(`"kind":"destroy"[^\n]*"sandbox":"` + id + `"[^\n]*"reason":"lost: `).Match(alog) {
				t.Errorf("no destroy event with reason lost for %s in the audit log", id)
			}
		}
	}
	// The new daemon works, and a clean stop destroys its sandboxes.
	sb, err := c2.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c2.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"echo", "ok"}}); err != nil || string(r.Stdout) != "ok\n" {
		t.Fatalf("exec after restart: %v", err)
	}
	// A stream in flight does not hold the stop up.
	running := make(chan struct{})
	go func() {
		_, _ = c2.ExecStream(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "echo go; sleep 300"}, Timeout: 5 * time.Minute}, func(client.Event) error {
			close(running)
			return nil
		})
	}()
	<-running
	stopAt := time.Now()
	_ = d2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d2.done:
	case <-time.After(20 * time.Second):
		t.Fatal("airlock serve did not stop on SIGTERM")
	}
	if d := time.Since(stopAt); d > 5*time.Second {
		t.Errorf("stopping took %v with an exec in flight", d)
	}
	if code := d2.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("serve exited %d after SIGTERM", code)
	}
	if left := append(sandboxProcs(t, []string{sb.ID}), sandboxCgroups([]string{sb.ID})...); len(left) != 0 {
		t.Errorf("left after a clean stop: %v", left)
	}
	o = airlockRun(t, invocation{args: []string{"reap", "--state-dir", dir, "--audit-key", dir + ".keys/audit.key"}})
	if o.code != 0 || !strings.Contains(o.stderr, "0 sandboxes marked lost") {
		t.Errorf("reap after a clean stop: %d %q %q", o.code, o.stdout, o.stderr)
	}
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
	if o.code != exitAirlock || !strings.Contains(o.stderr, "not_running") {
		t.Fatalf("exec in a removed sandbox: %d %q", o.code, o.stderr)
	}
	// Without the environment, the CLI says what to set.
	o = airlockRun(t, invocation{args: []string{"sandbox", "ls"}, env: []string{"AIRLOCK_URL="}})
	if o.code != exitAirlock || !strings.Contains(o.stderr, "AIRLOCK_URL") {
		t.Fatalf("ls without AIRLOCK_URL: %d %q", o.code, o.stderr)
	}
}
