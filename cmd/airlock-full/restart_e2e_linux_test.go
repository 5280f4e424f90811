package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// The fault tests of sandboxes that outlive their daemon: kill -9 of
// airlock serve in the middle of work, a TTL that passes while no daemon
// runs, the death of what holds a sandbox, egress across a restart, a
// clean stop, and an upgrade to a daemon of another agent protocol. Each
// runs on native and on gVisor.

// faultDrivers are the drivers the fault tests run on, each with what it
// needs of the host.
func faultDrivers(t *testing.T, fn func(t *testing.T, driver string)) {
	t.Run("native", func(t *testing.T) { fn(t, "native") })
	t.Run("gvisor", func(t *testing.T) {
		testcap.Require(t, "runsc")
		fn(t, "gvisor")
	})
}

// fault is a state directory whose daemon a test kills and starts again.
type fault struct {
	t      *testing.T
	dir    string
	key    string
	cfg    string
	driver string
	d      *daemon
	c      *client.Client
	extra  []string // added to airlock serve's arguments
	// bin is the directory of the airlock and airlock-agent binaries the
	// daemon runs; "" is the test's own build.
	bin string
}

// newFault makes a state directory with an operator key and a config whose
// default template runs on driver, with templates added as TOML.
func newFault(t *testing.T, driver, templates string) *fault {
	t.Helper()
	requireE2E(t)
	// Agents whose daemon was killed come to this process (their
	// subreaper) instead of the host's init, and are reaped here.
	subreaper(t)
	f := &fault{t: t, dir: t.TempDir(), driver: driver}
	f.key = newKey(t, f.dir, "operator")
	f.cfg = filepath.Join(t.TempDir(), "config.toml")
	conf := fmt.Sprintf("[[template]]\nname = \"default\"\ndriver = %q\ntimeout = \"5m\"\n%s", driver, templates)
	if err := os.WriteFile(f.cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// start starts a daemon on the state directory and waits until it serves.
func (f *fault) start() {
	f.t.Helper()
	f.d = startDaemonFrom(f.t, f.bin, f.dir, append([]string{"--config", f.cfg}, f.extra...)...)
	var err error
	if f.c, err = client.New(f.d.url, f.key); err != nil {
		f.t.Fatal(err)
	}
}

// kill9 kills the daemon with SIGKILL.
func (f *fault) kill9() {
	f.t.Helper()
	if err := f.d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	<-f.d.done
}

// stop sends the daemon SIGTERM and waits for it to exit 0, within 20 s.
func (f *fault) stop() time.Duration {
	f.t.Helper()
	start := time.Now()
	_ = f.d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.d.done:
	case <-time.After(20 * time.Second):
		f.t.Fatalf("airlock serve did not stop on SIGTERM:\n%s", f.d.log())
	}
	if code := f.d.cmd.ProcessState.ExitCode(); code != 0 {
		f.t.Errorf("airlock serve exited %d after SIGTERM:\n%s", code, f.d.log())
	}
	return time.Since(start)
}

// create makes a sandbox of template (empty: default).
func (f *fault) create(ctx context.Context, req client.CreateRequest) string {
	f.t.Helper()
	sb, err := f.c.CreateSandbox(ctx, req)
	if err != nil {
		f.t.Fatalf("create: %v", err)
	}
	return sb.ID
}

// sh runs script in sandbox id and returns its result.
func (f *fault) sh(ctx context.Context, id, script string) *client.ExecResult {
	f.t.Helper()
	r, err := f.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		f.t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return r
}

// leftovers lists what of sandboxes ids remains on the host: a process in
// their cgroups, a cgroup, a lock, a session socket or log, a mount, a
// gVisor bundle.
func leftovers(t *testing.T, ids []string) []string {
	t.Helper()
	reapOrphans()
	out := append(sandboxProcs(t, ids), sandboxCgroups(ids)...)
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, id := range ids {
		for _, p := range []string{
			"/run/airlock/sandboxes/" + id + ".lock", "/run/airlock/sessions/" + id + ".sock",
			"/run/airlock/sessions/" + id + ".log", "/run/airlock/gvisor/bundles/" + id,
		} {
			if _, err := os.Lstat(p); err == nil {
				out = append(out, p)
			}
		}
		if bytes.Contains(mounts, []byte(id)) {
			out = append(out, "a mount naming "+id)
		}
	}
	return out
}

// noLeftovers waits up to 10 s for nothing of ids to remain.
func noLeftovers(t *testing.T, what string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := leftovers(t, ids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s, these remain on the host: %v", what, left)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fetchInside fetches url from inside sandbox id, with retries for 5 s
// (a server that is starting), and returns the body.
func (f *fault) fetchInside(ctx context.Context, id, url string) (string, error) {
	prog := `import sys, time, urllib.request
for i in range(50):
    try:
        sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()); sys.exit(0)
    except Exception as e:
        err = e; time.sleep(0.1)
sys.stderr.write(str(err)); sys.exit(1)`
	r, err := f.c.Exec(ctx, id, client.ExecRequest{Argv: []string{"python3", "-c", prog, url}, Timeout: 20 * time.Second})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return "", fmt.Errorf("fetch %s from inside: exit %d: %s", url, r.ExitCode, r.Stderr)
	}
	return string(r.Stdout), nil
}

// TestServeRestart is the fault test of a daemon killed with SIGKILL in
// the middle of work: a foreground exec streaming, a background HTTP
// server, a file upload half done. After the restart the sandbox runs, its
// files are intact, the server answers from inside, the exec's result can
// be fetched by the id its stream began with, the half-done upload left
// no file under its name, and new execs work. Twenty times over; after
// the last DELETE nothing of any sandbox is left.
//
// The two drivers run side by side (the package's longest test: 113 s one
// after the other): each has its daemon on its own state directory, the
// sandboxes' locks under /run/airlock (held across a kill) keep a daemon's
// sweep off the other's, and nothing here asserts a duration beyond a
// 20 s wait.
func TestServeRestart(t *testing.T) {
	t.Parallel() // beside the other fault tests, after the package's other tests (faultParallel)
	faultDrivers(t, func(t *testing.T, driver string) {
		t.Parallel()
		f := newFault(t, driver, "")
		f.start()
		rounds := 20
		var ids []string
		for i := range rounds {
			ids = append(ids, restartRound(t, f, i))
			if t.Failed() {
				break
			}
		}
		noLeftovers(t, fmt.Sprintf("after %d rounds and the last DELETE", len(ids)), ids)
	})
}

// restartRound is one round of TestServeRestart; it returns the sandbox's
// id, which it deletes at the end.
func restartRound(t *testing.T, f *fault, round int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := f.create(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 128 << 20}})
	kept := fmt.Sprintf("kept in round %d\n", round)
	if err := f.c.WriteFile(ctx, id, "/workspace/kept.txt", strings.NewReader(kept), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{
		Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace"},
	}}); err != nil {
		t.Fatal(err)
	}
	if body, err := f.fetchInside(ctx, id, "http://127.0.0.1:8000/kept.txt"); err != nil || body != kept {
		t.Fatalf("round %d: the server inside, before the kill: %q, %v", round, body, err)
	}

	// A foreground exec, streaming: its id comes with the first event.
	execID := make(chan string, 1)
	printed := make(chan struct{})
	streamErr := make(chan error, 1)
	go func() {
		var err error
		for ev, e := range f.c.ExecEvents(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", "echo started; sleep 2; echo done; exit 3"}}) {
			if e != nil {
				err = e
				break
			}
			switch {
			case ev.Type == "start":
				execID <- ev.ID
			case strings.Contains(string(ev.Data), "started"):
				close(printed)
			}
		}
		streamErr <- err
	}()
	// An upload that stops half way.
	pr, pw := io.Pipe()
	defer pw.Close()
	uploadErr := make(chan error, 1)
	go func() { uploadErr <- f.c.WriteFile(ctx, id, "/workspace/upload.bin", pr, 0o644) }()
	if _, err := pw.Write(bytes.Repeat([]byte("x"), 256<<10)); err != nil {
		t.Fatal(err)
	}
	var eid string
	select {
	case eid = <-execID:
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: the exec's stream did not start", round)
	}
	select {
	case <-printed:
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: the exec printed nothing", round)
	}

	f.kill9()
	if err := <-streamErr; !errors.Is(err, client.ErrStreamBroken) {
		t.Errorf("round %d: the exec's stream after kill -9: %v; want it broken", round, err)
	}
	// The client's request still waits for the rest of its body.
	pw.CloseWithError(errors.New("the upload stops"))
	if err := <-uploadErr; err == nil {
		t.Errorf("round %d: the half-done upload succeeded", round)
	}
	f.start()

	sb, err := f.c.GetSandbox(ctx, id)
	if err != nil || sb.State != client.StateRunning {
		t.Fatalf("round %d: after the restart the sandbox is %+v, %v; want running", round, sb, err)
	}
	if b, err := f.c.ReadFile(ctx, id, "/workspace/kept.txt"); err != nil || string(b) != kept {
		t.Errorf("round %d: a file written before the kill reads %q, %v", round, b, err)
	}
	if body, err := f.fetchInside(ctx, id, "http://127.0.0.1:8000/kept.txt"); err != nil || body != kept {
		t.Errorf("round %d: the background server after the restart: %q, %v", round, body, err)
	}
	// The exec ran on to its end; its result is kept for its id.
	var p *client.Process
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if p, err = f.c.ExecResult(ctx, id, eid); err != nil {
			t.Fatalf("round %d: the result of exec %s after the restart: %v", round, eid, err)
		}
		if !p.Running || time.Now().After(deadline) {
			break
		}
	}
	if p.Result == nil || p.Result.ExitCode != 3 || p.Result.Reason != "exit" || string(p.Stdout) != "started\ndone\n" {
		t.Errorf("round %d: exec %s after the restart: %+v result %+v stdout %q; want exit 3 and all it printed", round, eid, p, p.Result, p.Stdout)
	}
	if _, err := f.c.Stat(ctx, id, "/workspace/upload.bin"); !client.IsNotFound(err) {
		t.Errorf("round %d: the half-done upload left a file under its name: %v", round, err)
	}
	if ls, err := f.c.ListFiles(ctx, id, "/workspace"); err != nil || len(ls) != 1 || ls[0].Name != "kept.txt" {
		t.Errorf("round %d: /workspace after the restart holds %+v, %v; want kept.txt alone", round, ls, err)
	}
	if r := f.sh(ctx, id, "echo new"); r.ExitCode != 0 || string(r.Stdout) != "new\n" {
		t.Errorf("round %d: a new exec after the restart: %+v", round, r)
	}
	if err := f.c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, fmt.Sprintf("round %d: after DELETE", round), []string{id})
	return id
}

// TestServeRestartTTL: a sandbox whose TTL passes while no daemon runs is
// destroyed when the next one starts, before it serves; idle timeouts go
// on across the restart too, the time no daemon ran counting.
func TestServeRestartTTL(t *testing.T) {
	faultDrivers(t, func(t *testing.T, driver string) {
		t.Parallel() // its two drivers side by side, as TestServeRestart's
		f := newFault(t, driver, "")
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		short := f.create(ctx, client.CreateRequest{TTL: 2 * time.Second})
		long := f.create(ctx, client.CreateRequest{})
		idle := f.create(ctx, client.CreateRequest{IdleTimeout: 4 * time.Second})
		f.sh(ctx, idle, "true")
		f.kill9()
		time.Sleep(5 * time.Second)
		f.start()
		if sb, err := f.c.GetSandbox(ctx, short); err != nil || sb.State != client.StateDestroyed || sb.EndReason != "ttl" {
			t.Errorf("a sandbox whose TTL passed while no daemon ran: %+v, %v; want destroyed, ttl", sb, err)
		}
		noLeftovers(t, "after its TTL passed while no daemon ran", []string{short})
		var sb *client.Sandbox
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if sb, err = f.c.GetSandbox(ctx, idle); err != nil || sb.State != client.StateRunning {
				break
			}
		}
		if err != nil || sb.State != client.StateDestroyed || sb.EndReason != "idle" {
			t.Errorf("a sandbox idle for longer than its idle timeout, mostly while no daemon ran: %+v, %v; want destroyed, idle", sb, err)
		}
		if sb, err := f.c.GetSandbox(ctx, long); err != nil || sb.State != client.StateRunning {
			t.Errorf("a sandbox whose TTL did not pass: %+v, %v; want running", sb, err)
		}
		if r := f.sh(ctx, long, "echo alive"); string(r.Stdout) != "alive\n" {
			t.Errorf("exec in the other sandbox: %+v", r)
		}
	})
}

// holderPids are the pids of what holds sandbox id on the host: its agent
// (native), or `runsc run` (gVisor).
func holderPids(t *testing.T, driver, id string) []int {
	t.Helper()
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		cg, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		switch driver {
		case "native":
			if strings.Contains(string(cg), "/airlock/"+id+"/agent\n") && strings.HasPrefix(filepath.Base(args[0]), "airlock-agent") {
				out = append(out, pid)
			}
		case "gvisor":
			if args[0] == "runsc" && slices.Contains(args, "run") && slices.Contains(args, id) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// TestServeHolderKilled: what holds a sandbox, killed with SIGKILL while
// the daemon runs (the agent, or runsc; before and after a restart of the
// daemon), ends the sandbox with reason error and a message; nothing of it
// is left, and the audit log has its end.
func TestServeHolderKilled(t *testing.T) {
	t.Parallel() // beside the other fault tests, after the package's other tests (faultParallel)
	faultDrivers(t, func(t *testing.T, driver string) {
		t.Parallel() // its two drivers side by side, as TestServeRestart's
		f := newFault(t, driver, "")
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		check := func(what, id string) {
			t.Helper()
			pids := holderPids(t, driver, id)
			if len(pids) != 1 {
				t.Fatalf("%s: the holder of %s: %v", what, id, pids)
			}
			if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var sb *client.Sandbox
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				sb, err = f.c.GetSandbox(ctx, id)
				if err != nil || sb.State != client.StateRunning || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || sb.State != client.StateDestroyed || sb.EndReason != "error" || sb.EndMessage == "" {
				t.Errorf("%s: after its holder was killed, sandbox %s is %+v, %v; want destroyed with reason error and a message", what, id, sb, err)
			} else {
				t.Logf("%s: %s", what, sb.EndMessage)
			}
			noLeftovers(t, what+": after its holder was killed", []string{id})
			alog, err := os.ReadFile(filepath.Join(f.dir, "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`"kind":"destroy"[^\n]*"sandbox":"` + id + `"[^\n]*"reason":"error: `).Match(alog) {
				t.Errorf("%s: no destroy event with reason error for %s in the audit log", what, id)
			}
		}
		check("made by this daemon", f.create(ctx, client.CreateRequest{}))
		id := f.create(ctx, client.CreateRequest{})
		f.kill9()
		f.start()
		check("reattached after a restart", id)
	})
}

// TestServeRestartEgress: a sandbox with egress reaches its allowed
// destination after a restart; a tunnel open at the kill is closed, not
// left hanging.
func TestServeRestartEgress(t *testing.T) {
	t.Parallel() // beside the other fault tests, after the package's other tests (faultParallel)
	faultDrivers(t, func(t *testing.T, driver string) {
		t.Parallel() // its two drivers side by side, as TestServeRestart's
		held := make(chan struct{}, 1)
		released := make(chan struct{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
				select {
				case held <- struct{}{}:
				default:
				}
				select {
				case <-r.Context().Done():
				case <-released:
				}
				return
			}
			_, _ = io.WriteString(w, "reached\n")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { close(released); srv.Close() })
		addr := ln.Addr().String()
		f := newFault(t, driver, fmt.Sprintf("\n[[template]]\nname = \"egress\"\ndriver = %q\ntimeout = \"5m\"\n[template.network]\nmode = \"egress\"\nallow_addresses = [%q]\n", driver, addr))
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := f.create(ctx, client.CreateRequest{Template: "egress"})
		if body, err := f.fetchInside(ctx, id, "http://"+addr+"/"); err != nil || body != "reached\n" {
			t.Fatalf("egress before the restart: %q, %v", body, err)
		}
		// A connection through the tunnel, held open by the server.
		prog := `import socket, sys
s = socket.create_connection(tuple(sys.argv[1].rsplit(":", 1)), timeout=120)
s.sendall(b"GET /hold HTTP/1.0\r\n\r\n")
while s.recv(65536):
    pass
open("/workspace/tunnel", "w").write("closed")`
		if _, err := f.c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"python3", "-c", prog, addr}}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held:
		case <-time.After(20 * time.Second):
			t.Fatal("the held connection never reached the server")
		}
		f.kill9()
		f.start()
		var state []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if state, err = f.c.ReadFile(ctx, id, "/workspace/tunnel"); err == nil {
				break
			}
		}
		if string(state) != "closed" {
			t.Errorf("the tunnel open at the kill: %q, %v; want it closed", state, err)
		}
		if body, err := f.fetchInside(ctx, id, "http://"+addr+"/"); err != nil || body != "reached\n" {
			t.Errorf("egress after the restart: %q, %v", body, err)
		}
	})
}

// TestServeStop: on SIGTERM the daemon stops at once and its sandboxes
// run on, a command in flight too; the next daemon takes them up. With
// --shutdown-sandboxes a stop ends them all.
func TestServeStop(t *testing.T) {
	faultDrivers(t, func(t *testing.T, driver string) {
		f := newFault(t, driver, "")
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		id := f.create(ctx, client.CreateRequest{})
		if _, err := f.c.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "300"}}}); err != nil {
			t.Fatal(err)
		}
		running := make(chan struct{})
		go func() {
			_, _ = f.c.ExecStream(ctx, id, client.ExecRequest{Argv: []string{"sh", "-c", "echo go; sleep 3; echo end"}}, func(client.Event) error {
				select {
				case <-running:
				default:
					close(running)
				}
				return nil
			})
		}()
		<-running
		if took := f.stop(); took > 5*time.Second {
			t.Errorf("stopping took %v with an exec in flight", took)
		}
		if !strings.Contains(f.d.log(), "the sandboxes run on") {
			t.Errorf("the stop is not logged")
		}
		if procs := sandboxProcs(t, []string{id}); len(procs) < 2 {
			t.Errorf("after SIGTERM the sandbox's processes are %v; want them running", procs)
		}
		f.start()
		ps, err := f.c.ListProcesses(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var bg bool
		for _, p := range ps {
			bg = bg || slices.Equal(p.Argv, []string{"sleep", "300"}) && p.Running
		}
		if !bg {
			t.Errorf("the background process after a stop and a start: %+v", ps)
		}
		// A stop with --shutdown-sandboxes ends them all.
		f.stop()
		f.extra = []string{"--shutdown-sandboxes"}
		f.start()
		f.stop()
		noLeftovers(t, "after a stop with --shutdown-sandboxes", []string{id})
		f.extra = nil
		f.start()
		if sb, err := f.c.GetSandbox(ctx, id); err != nil || sb.State != client.StateDestroyed || sb.EndReason != "shutdown" {
			t.Errorf("after a stop with --shutdown-sandboxes: %+v, %v; want destroyed, shutdown", sb, err)
		}
	})
}

// TestServeUpgrade: a daemon of another agent protocol version (built
// with -X …/agent.protocolVersion) finds the sandboxes the one before made,
// lists them as mismatched with their protocol, leaves them running, and
// refuses work in them; DELETE (or airlock reap) ends them. The daemon
// built back at the first version takes up those that still run.
func TestServeUpgrade(t *testing.T) {
	upgradeDrivers(t, func(t *testing.T, u upgradeCase) {
		newBin := upgradeBinaries(t)
		f := u.f
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		kept := f.create(ctx, client.CreateRequest{})
		deleted := f.create(ctx, client.CreateRequest{})
		old, err := f.c.GetSandbox(ctx, kept)
		if err != nil || old.AgentProtocol == 0 || old.Mismatch != "" {
			t.Fatalf("a sandbox of this daemon: %+v, %v; want its agent protocol and no mismatch", old, err)
		}
		if _, err := f.c.StartProcess(ctx, kept, client.StartProcessRequest{ExecRequest: client.ExecRequest{Argv: []string{"sleep", "300"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.c.Snapshot(ctx, kept, client.SnapshotRequest{Name: "before"}); err != nil {
			t.Fatal(err)
		}
		f.stop()

		f.bin = newBin
		f.start()
		for _, id := range []string{kept, deleted} {
			sb, err := f.c.GetSandbox(ctx, id)
			if err != nil || sb.State != client.StateRunning || sb.AgentProtocol != old.AgentProtocol || sb.Mismatch == "" {
				t.Errorf("after the upgrade, sandbox %s: %+v, %v; want running, protocol %d, mismatched", id, sb, err, old.AgentProtocol)
			}
		}
		if !u.running(kept) {
			t.Errorf("after the upgrade sandbox %s does not run; it must run on", kept)
		}
		_, err = f.c.Exec(ctx, kept, client.ExecRequest{Argv: []string{"true"}})
		var ae *client.Error
		if !errors.As(err, &ae) || ae.Code != "version_mismatch" || !strings.Contains(ae.Message, "protocol") {
			t.Errorf("an exec in a mismatched sandbox: %v; want version_mismatch naming the protocol", err)
		}
		for what, call := range map[string]func() error{
			"snapshot": func() error { _, err := f.c.Snapshot(ctx, kept, client.SnapshotRequest{}); return err },
			"restore":  func() error { _, err := f.c.Restore(ctx, kept, client.RestoreRequest{Snapshot: "before"}); return err },
		} {
			if err := call(); !errors.As(err, &ae) || ae.Code != "version_mismatch" {
				t.Errorf("a %s of a mismatched sandbox: %v; want version_mismatch", what, err)
			}
		}
		o := airlockRun(t, invocation{args: []string{"sandbox", "ls"}, env: []string{"AIRLOCK_URL=" + f.d.url, "AIRLOCK_API_KEY=" + f.key}, bin: newBin})
		if o.code != 0 || !regexp.MustCompile(kept+`\s+running\s+default\s+`+strconv.Itoa(old.AgentProtocol)+` \(mismatch\)`).MatchString(o.stdout) || !strings.Contains(o.stderr, "protocol") {
			t.Errorf("sandbox ls after the upgrade:\n%s%s", o.stdout, o.stderr)
		}
		if !strings.Contains(f.d.log(), "sandbox made by an airlock of another protocol version") {
			t.Errorf("the upgraded daemon does not say which sandboxes it cannot use")
		}
		if err := f.c.DeleteSandbox(ctx, deleted); err != nil {
			t.Errorf("delete a mismatched sandbox: %v", err)
		}
		u.gone(t, "after DELETE of a mismatched sandbox", []string{deleted})
		f.stop()

		// Back at the first version: the sandbox it made is its own again.
		f.bin = ""
		f.start()
		if r := f.sh(ctx, kept, "echo back"); string(r.Stdout) != "back\n" {
			t.Errorf("exec after going back: %+v", r)
		}
		f.stop()
		if !u.reap {
			f.bin = newBin
			f.start()
			if err := f.c.DeleteSandbox(ctx, kept); err != nil {
				t.Errorf("delete a mismatched sandbox: %v", err)
			}
			u.gone(t, "after DELETE of a mismatched sandbox", []string{kept})
			return
		}
		// airlock reap of the other version ends it too.
		o = airlockRun(t, invocation{args: []string{"reap", "--state-dir", f.dir, "--audit-key", f.dir + ".keys/audit.key"}, bin: newBin})
		if o.code != 0 || !strings.Contains(o.stdout, kept+"\treaped") {
			t.Errorf("airlock reap of another version: %d %q %q", o.code, o.stdout, o.stderr)
		}
		noLeftovers(t, "after airlock reap", []string{kept})
	})
}

// upgradeCase is one driver's upgrade test: its fault, and how the test
// sees what a sandbox holds on the host.
type upgradeCase struct {
	f *fault
	// running says sandbox id runs on the host.
	running func(id string) bool
	// gone waits for nothing of ids to remain.
	gone func(t *testing.T, what string, ids []string)
	// reap: airlock reap ends the driver's sandboxes without a daemon.
	reap bool
}

// upgradeDrivers runs fn on every driver that reattaches after a restart,
// with what each needs of the host.
func upgradeDrivers(t *testing.T, fn func(t *testing.T, u upgradeCase)) {
	faultDrivers(t, func(t *testing.T, driver string) {
		fn(t, upgradeCase{
			f:       newFault(t, driver, ""),
			running: func(id string) bool { return len(sandboxProcs(t, []string{id})) >= 2 },
			gone:    noLeftovers,
			reap:    true,
		})
	})
	t.Run("docker", func(t *testing.T) {
		image := requireDocker(t)
		f := newFault(t, "docker", "")
		conf := fmt.Sprintf("[[template]]\nname = \"default\"\ndriver = \"docker\"\nimage = %q\ntimeout = \"5m\"\n", image)
		if err := os.WriteFile(f.cfg, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		fn(t, upgradeCase{
			f: f,
			running: func(id string) bool {
				return slices.Contains(sandboxContainers(t, []string{id}), id+" (running)")
			},
			gone: func(t *testing.T, what string, ids []string) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					left := sandboxContainers(t, ids)
					if len(left) == 0 {
						return
					}
					if time.Now().After(deadline) {
						t.Errorf("%s, containers of these sandboxes remain: %v", what, left)
						return
					}
				}
			},
		})
	})
}

// upgradeBinaries builds airlock and its agent claiming agent protocol 99,
// once per test binary, and returns their directory.
func upgradeBinaries(t *testing.T) string {
	t.Helper()
	upgradeOnce.Do(func() {
		upgradeDir = filepath.Join(binDir, "v99")
		if upgradeErr = os.MkdirAll(upgradeDir, 0o755); upgradeErr == nil {
			upgradeErr = buildBinaries(upgradeDir, "-ldflags=-X github.com/airlock-sandbox/airlock/internal/agent.protocolVersion=99")
		}
	})
	if upgradeErr != nil {
		t.Fatal(upgradeErr)
	}
	return upgradeDir
}

var (
	upgradeOnce sync.Once
	upgradeDir  string
	upgradeErr  error
)
