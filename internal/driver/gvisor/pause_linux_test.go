package gvisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// run runs argv in in and returns its output, failing t unless it exits 0.
func run(t *testing.T, in sandbox.Instance, argv ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sandbox.Run(context.Background(), in, sandbox.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errb, Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v: %v %+v\n%s%s", argv, err, res, out.String(), errb.String())
	}
	return out.String()
}

// server is a Python process that keeps a random number in memory and
// serves it over HTTP on 127.0.0.1:8000, as a background exec; fetch
// reads it.
const (
	server = `import http.server, os
secret = os.urandom(8).hex()
open('/tmp/secret', 'w').write(secret)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(secret.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
	fetch = `import urllib.request, time
for i in range(600):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.05)
`
)

// TestPauseResume pauses a sandbox whose background Python server holds a
// random number only in its memory, checks that nothing of it runs while
// paused, resumes it and asks the same server again.
func TestPauseResume(t *testing.T) {
	requireGVisor(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in, err := d.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := in.ID()
	t.Cleanup(func() {
		_ = in.Close(ctx) // a sandbox that was not paused
		_ = d.Discard(ctx, id, nil)
	})
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", server}, Background: true}); err != nil {
		t.Fatal(err)
	}
	before := strings.TrimSpace(run(t, in, "python3", "-c", fetch))
	if len(before) != 16 {
		t.Fatalf("the server answered %q", before)
	}
	run(t, in, "rm", "/tmp/secret") // only the process's memory has it now
	group := in.(*agentdriver.Instance).Host().(*host).group

	dir := t.TempDir()
	t0 := time.Now()
	st, back, err := d.Pause(ctx, in, dir)
	if err != nil {
		if back != nil {
			back.Close(ctx)
		}
		t.Fatalf("pause: %v", err)
	}
	t.Logf("pause: %v, image %d bytes", time.Since(t0), dirBytes(t, dir))
	d.SettlePause(id) // what it held on the host goes after the image is written
	if group != nil && group.Exists() {
		if procs, _ := group.Procs(); len(procs) > 0 {
			t.Fatalf("the paused sandbox still runs processes: %v", procs)
		}
	}
	if left := findLeaks(id); len(left) > 1 { // its bundle stays
		t.Errorf("a paused sandbox left: %v", left)
	}
	if err := d.Sweep(ctx); err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	in2, err := d.Resume(ctx, id, st, dir)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer in2.Close(ctx)
	after := strings.TrimSpace(run(t, in2, "python3", "-c", fetch))
	t.Logf("resume to the server's answer: %v", time.Since(t0))
	if after != before {
		t.Fatalf("after the resume the server answered %q, before %q", after, before)
	}
}

// TestResumeRefusesTampered: a pause image changed after the pause is not
// restored as if nothing happened (the supervisor checks digests; this is
// runsc's own check of a truncated image).
func TestPauseRefusesMounts(t *testing.T) {
	requireGVisor(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in, err := d.Create(ctx, sandbox.Spec{Mounts: []sandbox.Mount{{Source: t.TempDir(), Target: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	_, back, err := d.Pause(ctx, in, t.TempDir())
	if !errors.Is(err, sandbox.ErrUnsupported) || back != in {
		t.Fatalf("pause of a sandbox with a host mount: %v (instance %v)", err, back)
	}
	run(t, in, "true")
}

func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestPauseResumeMemory measures a pause and a resume of a 256 MiB
// sandbox whose Python process holds 160 MiB (non-zero pages).
func TestPauseResumeMemory(t *testing.T) {
	requireGVisor(t)
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in, err := d.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := in.ID()
	t.Cleanup(func() {
		_ = in.Close(ctx) // a sandbox that was not paused
		_ = d.Discard(ctx, id, nil)
	})
	hold := `import http.server, hashlib
data = bytearray(160 << 20)
chunk = b'\x5a' * (1 << 20)
for i in range(160): data[i << 20:(i + 1) << 20] = chunk
digest = hashlib.sha256(data).hexdigest()[:16]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(hashlib.sha256(data).hexdigest()[:16].encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
	p, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", hold}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		res, err := p.Wait(ctx)
		if err == nil {
			t.Logf("the server ended: %+v", res)
		}
	}()
	before := strings.TrimSpace(run(t, in, "python3", "-c", fetch))
	dir := t.TempDir()
	t0 := time.Now()
	st, back, err := d.Pause(ctx, in, dir)
	if err != nil {
		if back != nil {
			back.Close(ctx)
		}
		t.Fatalf("pause: %v", err)
	}
	pause := time.Since(t0)
	t0 = time.Now()
	in2, err := d.Resume(ctx, id, st, dir)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer in2.Close(ctx)
	resume := time.Since(t0)
	run(t, in2, "true")
	firstExec := time.Since(t0)
	after := strings.TrimSpace(run(t, in2, "python3", "-c", fetch))
	t.Logf("256 MiB sandbox holding 160 MiB: pause %v, image %d MiB; resume %v, to a first exec %v", pause.Round(time.Millisecond), dirBytes(t, dir)>>20, resume.Round(time.Millisecond), firstExec.Round(time.Millisecond))
	if after != before || len(before) != 16 {
		t.Fatalf("the server's digest of its memory was %q, after the resume %q", before, after)
	}
}

// TestPauseInterrupted: an airlock process killed in the middle of a
// pause leaves the sandbox running (killed before the checkpoint: the
// next one reattaches to it) or gone with nothing left of it (killed
// after: the image is the supervisor's, which keeps or drops it).
func TestPauseInterrupted(t *testing.T) {
	requireGVisor(t)
	ctx := context.Background()
	for _, checkpointed := range []bool{false, true} {
		d, err := New(Options{Persistent: true})
		if err != nil {
			t.Fatal(err)
		}
		in, err := d.Create(ctx, sandbox.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		id := in.ID()
		ai := in.(*agentdriver.Instance)
		h := ai.Host().(*host)
		state, err := ai.DriverState()
		if err != nil {
			t.Fatal(err)
		}
		// Pause's steps, up to where the process "dies".
		if err := ai.Detach(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.runscCmd(10*time.Second, "kill", id, signalName(agent.SuspendSignal)); err != nil {
			t.Fatal(err)
		}
		if err := awaitGone(ctx, h.sockPath(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.bundle, pausedMark), mustJSON(pausedState{Spec: h.spec}), 0o600); err != nil {
			t.Fatal(err)
		}
		img := t.TempDir()
		if checkpointed {
			if _, err := d.runscCmd(time.Minute, "checkpoint", "--image-path="+img, id); err != nil {
				t.Fatal(err)
			}
		}
		d2, err := New(Options{Persistent: true})
		if err != nil {
			t.Fatal(err)
		}
		if checkpointed {
			// The next process finds it saved (before any reattach), and
			// resumes it.
			paused, ok := d2.Paused(ctx, id, state)
			if !ok {
				t.Fatal("Paused does not find the checkpointed sandbox")
			}
			if left := findLeaks(id); len(left) > 1 { // its bundle stays
				t.Errorf("a sandbox checkpointed by a process that died left %v", left)
			}
			in2, err := d2.Resume(ctx, id, paused, img)
			if err != nil {
				t.Fatalf("resume of a pause whose process died: %v", err)
			}
			run(t, in2, "true")
			in2.Close(ctx)
			continue
		}
		if _, ok := d2.Paused(ctx, id, state); ok {
			t.Fatal("Paused finds a sandbox whose runsc runs")
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		back, err := d2.Recover(rctx, id, state)
		cancel()
		if err != nil {
			t.Fatalf("reattach to a sandbox whose pause was cut short: %v", err)
		}
		run(t, back, "true")
		back.Close(ctx)
	}
}

// TestResumeMoved: a sandbox paused by one daemon is resumed by another
// with a state directory of its own (as from the object store: the image
// copied, the first daemon's bundle gone), its bundle made from the
// paused state's OCI spec; its background server answers the same.
func TestResumeMoved(t *testing.T) {
	requireGVisor(t)
	ctx := context.Background()
	stateDir := func() string {
		dir := t.TempDir()
		// runsc binds a network namespace in its root, which must go
		// before the directory can.
		t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dir, "gvisor", "state", "null-netns"), unix.MNT_DETACH) })
		return dir
	}
	a, err := New(Options{Persistent: true, StateDir: stateDir()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Persistent: true, StateDir: stateDir()})
	if err != nil {
		t.Fatal(err)
	}
	in, err := a.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := in.ID()
	t.Cleanup(func() {
		_ = in.Close(ctx)
		_ = a.Discard(ctx, id, nil)
		_ = b.Discard(ctx, id, nil)
	})
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", server}, Background: true}); err != nil {
		t.Fatal(err)
	}
	before := strings.TrimSpace(run(t, in, "python3", "-c", fetch))
	run(t, in, "rm", "/tmp/secret")
	dir := t.TempDir()
	st, back, err := a.Pause(ctx, in, dir)
	if err != nil {
		if back != nil {
			back.Close(ctx)
		}
		t.Fatalf("pause: %v", err)
	}
	a.SettlePause(id)
	moved := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(moved, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Discard(ctx, id, st); err != nil { // the first host is gone
		t.Fatal(err)
	}
	t0 := time.Now()
	in2, err := b.Resume(ctx, id, st, moved)
	if err != nil {
		t.Fatalf("resume on the other daemon: %v", err)
	}
	defer in2.Close(ctx)
	after := strings.TrimSpace(run(t, in2, "python3", "-c", fetch))
	t.Logf("resume on the other daemon to the server's answer: %v", time.Since(t0))
	if after != before || len(after) != 16 {
		t.Fatalf("after the move the server answered %q, before %q", after, before)
	}
	if out := run(t, in2, "cat", "/etc/hostname"); out == "" {
		t.Errorf("no /etc/hostname after the move")
	}
}
