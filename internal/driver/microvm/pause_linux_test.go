package microvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// pauseServer keeps a random secret in a Python process's memory and
// serves it on 127.0.0.1:8000; pauseFetch reads it.
const (
	pauseServer = `import http.server, os
secret = os.urandom(8).hex()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(secret.encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`
	pauseFetch = `import urllib.request, time
for i in range(600):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000', timeout=5).read().decode()); break
    except OSError:
        time.sleep(0.1)
`
)

// pausedSandbox makes a sandbox whose background server holds a secret,
// and returns it with the secret.
func pausedSandbox(t *testing.T, d *Driver, limits sandbox.Limits) (sandbox.Instance, string) {
	t.Helper()
	in, err := d.Create(t.Context(), sandbox.Spec{Limits: limits})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := in.Start(t.Context(), sandbox.ExecRequest{Argv: []string{"python3", "-c", pauseServer}, Background: true}); err != nil {
		in.Close(context.Background())
		t.Fatal(err)
	}
	secret := fetchSecret(t, in)
	if len(secret) != 16 {
		in.Close(context.Background())
		t.Fatalf("the server answered %q", secret)
	}
	return in, secret
}

// fetchSecret asks the sandbox's server again.
func fetchSecret(t *testing.T, in sandbox.Instance) string {
	t.Helper()
	out, res := run(t, in, "python3", "-c", pauseFetch)
	if res.ExitCode != 0 {
		t.Fatalf("fetch: %+v", res)
	}
	return strings.TrimSpace(out)
}

// pauseLimits: a 256 MiB guest.
var pauseLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 60 * time.Second, Lifetime: 10 * time.Minute,
	DiskBytes: 32 << 20, TmpBytes: 16 << 20}

// TestPauseResume pauses a sandbox whose background Python server holds a
// random secret: no QEMU of it runs while paused; resumed, the same
// server answers the same secret, and the guest's clock is the host's.
func TestPauseResume(t *testing.T) {
	d := newDriver(t, Options{})
	ctx := t.Context()
	in, secret := pausedSandbox(t, d, pauseLimits)
	id := in.ID()
	pid := hostOf(in).vm.Pid
	dir := t.TempDir()
	t0 := time.Now()
	st, back, err := d.Pause(ctx, in, dir)
	if err != nil {
		if back != nil {
			back.Close(context.Background())
		}
		t.Fatalf("pause: %v", err)
	}
	pause := time.Since(t0)
	if back != nil {
		t.Fatalf("a pause that worked returned an instance")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("QEMU (pid %d) of the paused sandbox still exists: %v", pid, err)
	}
	if leaks := findLeaks(id); len(leaks) > 0 {
		t.Fatalf("the paused sandbox left on the host: %v", leaks)
	}
	fi, err := os.Stat(filepath.Join(dir, pauseImage))
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	in2, err := d.Resume(ctx, id, st, dir)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer in2.Close(context.Background())
	resume := time.Since(t0)
	sh(t, in2, "true")
	first := time.Since(t0)
	if got := fetchSecret(t, in2); got != secret {
		t.Fatalf("after the resume the server answered %q, before %q", got, secret)
	}
	guest, err := strconv.ParseInt(strings.TrimSpace(sh(t, in2, "date +%s")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if skew := time.Now().Unix() - guest; skew < -5 || skew > 5 {
		t.Fatalf("the resumed guest's clock is %d s off the host's", skew)
	}
	t.Logf("pause %v (image %d MiB), resume %v, to a first exec %v", pause.Round(time.Millisecond), fi.Size()>>20, resume.Round(time.Millisecond), first.Round(time.Millisecond))
}

// TestResumeRefusesCutImage: a pause image cut short is refused, and
// leaves nothing running (the supervisor checks every file's digest
// first; this is the driver's own refusal of a stream QEMU cannot load).
func TestResumeRefusesCutImage(t *testing.T) {
	d := newDriver(t, Options{})
	ctx := t.Context()
	in, err := d.Create(ctx, sandbox.Spec{Limits: pauseLimits})
	if err != nil {
		t.Fatal(err)
	}
	id := in.ID()
	dir := t.TempDir()
	st, back, err := d.Pause(ctx, in, dir)
	if err != nil {
		if back != nil {
			back.Close(context.Background())
		}
		t.Fatalf("pause: %v", err)
	}
	img := filepath.Join(dir, pauseImage)
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	if in2, err := d.Resume(ctx, id, st, dir); err == nil {
		in2.Close(context.Background())
		t.Fatal("a cut image resumed")
	} else {
		t.Logf("refused: %v", err)
	}
	if leaks := findLeaks(id); len(leaks) > 0 {
		t.Fatalf("a refused resume left on the host: %v", leaks)
	}
}
