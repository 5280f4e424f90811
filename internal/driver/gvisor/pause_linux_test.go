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
for i in range(100):
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
	t.Cleanup(func() { _ = d.Discard(ctx, id, nil) })
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
