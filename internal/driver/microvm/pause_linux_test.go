package microvm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot/s3store"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/testcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
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

// meminfo prints the guest's memory figures.
const meminfo = "grep -E '^(MemTotal|MemFree|MemAvailable|Cached|Shmem):' /proc/meminfo | tr -s ' ' | tr '\\n' ' '"

// pauseLimits: a 256 MiB guest.
var pauseLimits = sandbox.Limits{MemoryBytes: 128 << 20, CPUs: 1, Pids: 64, Timeout: 60 * time.Second, Lifetime: 10 * time.Minute,
	DiskBytes: 32 << 20, TmpBytes: 16 << 20}

// TestPauseResume pauses a sandbox whose background Python server holds a
// random secret: no QEMU of it runs while paused; resumed, the same
// server answers the same secret, and the guest's clock is the host's.
func TestPauseResume(t *testing.T) {
	t.Parallel() // beside the other machine tests marked so, after the rest (parallelTests in microvm_linux_test.go)
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
	// A daemon that died before it recorded the pause: the next one's
	// driver finds the sandbox saved.
	d2 := newDriver(t, Options{})
	if found, ok := d2.Paused(ctx, id, nil); !ok || string(found) != string(st) {
		t.Fatalf("another driver did not find the sandbox saved: %v %s", ok, found)
	}
	t0 = time.Now()
	in2, err := d2.Resume(ctx, id, st, dir)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer in2.Close(context.Background())
	resume := time.Since(t0)
	sh(t, in2, "true")
	first := time.Since(t0)
	if _, ok := d2.Paused(ctx, id, nil); ok {
		t.Fatal("a resumed sandbox is still found saved")
	}
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

// TestPauseResumeMemory measures pauses and resumes of guests whose
// Python process holds most of their memory (non-zero pages): 256 MiB
// holding 64 MiB, and (without -short) 1 GiB holding 512 MiB. The
// server answers a digest of what it holds, the same after the resume.
func TestPauseResumeMemory(t *testing.T) {
	t.Parallel() // beside the other machine tests marked so, after the rest (parallelTests in microvm_linux_test.go)
	for _, c := range []struct {
		name    string
		limit   int64 // the workload's: the guest has 128 MiB more
		holdMiB int
		long    bool
		// cold boots the machine: one restored from a snapshot pays
		// twice on the host for each page it writes first (see
		// machine.AnonRAM), which 512 MiB more would take past its
		// host cgroup's limit.
		cold bool
	}{
		{"256MiB", 128 << 20, 64, false, false},
		{"1GiB", 896 << 20, 512, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.long && testing.Short() {
				t.Skip("-short")
			}
			d := newDriver(t, Options{Cold: c.cold})
			ctx := t.Context()
			l := pauseLimits
			l.MemoryBytes = c.limit
			in, err := d.Create(ctx, sandbox.Spec{Limits: l})
			if err != nil {
				t.Fatal(err)
			}
			hold := strings.ReplaceAll(`import http.server, hashlib, os
data = bytearray(HOLD << 20)
for i in range(HOLD): data[i << 20:(i + 1) << 20] = os.urandom(1 << 20)
digest = hashlib.sha256(data).hexdigest()[:16]
open('/tmp/held', 'w').close()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write((digest[:8] + '%08x' % (sum(data[::4096]) & 0xffffffff)).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`, "HOLD", strconv.Itoa(c.holdMiB))
			if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", hold}, Background: true}); err != nil {
				in.Close(context.Background())
				t.Fatal(err)
			}
			// Filling takes a while under TCG.
			wait := sandbox.ExecRequest{Argv: []string{"sh", "-c", "for i in $(seq 3000); do [ -e /tmp/held ] && exit 0; sleep 0.1; done; exit 1"}, Timeout: 5 * time.Minute}
			if res, err := sandbox.Run(ctx, in, wait); err != nil || res.ExitCode != 0 {
				in.Close(context.Background())
				t.Fatalf("the server did not fill its memory: %v %+v", err, res)
			}
			before := fetchSecret(t, in)
			t.Logf("before the pause: %s", sh(t, in, meminfo))
			id := in.ID()
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
			t.Logf("after the resume: %s", sh(t, in2, meminfo))
			after := fetchSecret(t, in2)
			t.Logf("%s guest holding %d MiB: pause %v, image %d MiB (%.2f s/GiB of guest); resume %v, to a first exec %v",
				c.name, c.holdMiB, pause.Round(time.Millisecond), fi.Size()>>20,
				pause.Seconds()/(float64(guestMemoryMiB(c.limit))/1024), resume.Round(time.Millisecond), first.Round(time.Millisecond))
			if after != before || len(before) != 16 {
				t.Fatalf("the server's digest of its memory was %q, after the resume %q", before, after)
			}
		})
	}
}

// TestLiveFork checkpoints a running sandbox whose server holds a secret
// and starts a clone from it: both run on and answer the secret; the
// clone's host name is its id, its machine id and random output are its
// own.
func TestLiveFork(t *testing.T) {
	d := newDriver(t, Options{})
	ctx := t.Context()
	in, secret := pausedSandbox(t, d, pauseLimits)
	defer in.Close(context.Background())
	dir := t.TempDir()
	t0 := time.Now()
	st, _, err := d.Checkpoint(ctx, in, dir)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	checkpoint := time.Since(t0)
	if got := fetchSecret(t, in); got != secret {
		t.Fatalf("after the checkpoint the source answered %q, before %q", got, secret)
	}
	t0 = time.Now()
	clone, err := d.Clone(ctx, sandbox.Spec{ID: sandbox.NewID()}, st, dir)
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	defer clone.Close(context.Background())
	sh(t, clone, "true")
	first := time.Since(t0)
	if got := fetchSecret(t, clone); got != secret {
		t.Fatalf("the clone's server answered %q, the source's %q", got, secret)
	}
	ident := "hostname; cat /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"
	a, b := strings.Fields(sh(t, in, ident)), strings.Fields(sh(t, clone, ident))
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("identity: %q, %q", a, b)
	}
	if b[0] != clone.ID() || a[0] != in.ID() {
		t.Fatalf("host names: source %q, clone %q (its id %s)", a[0], b[0], clone.ID())
	}
	if a[1] == b[1] || a[2] == b[2] {
		t.Fatalf("the source and its clone share a machine id or random output: %q, %q", a, b)
	}
	t.Logf("checkpoint %v; clone to a first exec %v", checkpoint.Round(time.Millisecond), first.Round(time.Millisecond))
}

// TestPauseDiskFull: a pause whose image does not fit (a 4 MiB file
// system) fails with the reason, and the sandbox runs on where it was.
func TestPauseDiskFull(t *testing.T) {
	t.Parallel() // beside the other machine tests marked so, after the rest (parallelTests in microvm_linux_test.go)
	d := newDriver(t, Options{})
	ctx := t.Context()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	in, secret := pausedSandbox(t, d, pauseLimits)
	_, back, err := d.Pause(ctx, in, dir)
	if back != nil {
		defer back.Close(context.Background())
	} else {
		in.Close(context.Background())
	}
	if err == nil {
		t.Fatal("a pause into 4 MiB worked")
	}
	t.Logf("refused: %v", err)
	if back == nil {
		t.Fatalf("the sandbox was lost: %v", err)
	}
	if got := fetchSecret(t, back); got != secret {
		t.Fatalf("after the failed pause the server answered %q, before %q", got, secret)
	}
}

// TestSupervisorRefusesTamperedImage: through the supervisor, a microVM's
// pause image changed after the pause (one byte of its memory flipped,
// which QEMU would load without a word) is refused by its digest, and
// the sandbox stays paused.
func TestSupervisorRefusesTamperedImage(t *testing.T) {
	d := newDriver(t, Options{})
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tmpl := supervisor.Template{Name: supervisor.DefaultTemplate, Driver: "microvm", Memory: supervisor.Size(pauseLimits.MemoryBytes),
		CPUs: 1, Pids: 64, Disk: supervisor.Size(pauseLimits.DiskBytes), Tmp: supervisor.Size(pauseLimits.TmpBytes),
		TTL: supervisor.Duration(10 * time.Minute), PausedTTL: supervisor.Duration(time.Hour)}
	sup, err := supervisor.New(supervisor.Options{
		Store: st, Drivers: map[string]sandbox.Driver{"microvm": d},
		Config: supervisor.Config{StateDir: dir, Templates: []supervisor.Template{tmpl}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	caller := supervisor.Caller{KeyID: "key-test"}
	info, err := sup.Create(ctx, caller, supervisor.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Kill(ctx, caller, info.ID)
	if _, err := sup.Pause(ctx, caller, info.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	img := filepath.Join(dir, "paused", info.ID, pauseImage)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the pause image is not where the supervisor keeps images: %v", err)
	}
	fi, _ := f.Stat()
	b := make([]byte, 1)
	off := fi.Size() / 2
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = sup.Resume(ctx, caller, info.ID)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "changed or cut short") {
		t.Fatalf("resume of a tampered image: %v", err)
	}
	if got, _ := sup.Get(ctx, caller, info.ID); got.State != store.StatePaused {
		t.Fatalf("after a refused resume it is %s", got.State)
	}
}

// TestResumeMovedShared: through two supervisors, each with its own
// state directory, registry and microVM driver (one cache: hosts of the
// same kind), whose snapshots are in one bucket (the s3 rig): a sandbox
// paused on the first is resumed on the second from the bucket, and its
// background server answers the secret it held in memory (decision 85).
func TestResumeMovedShared(t *testing.T) {
	t.Parallel() // beside the other machine tests marked so, after the rest (parallelTests in microvm_linux_test.go)
	testcap.Require(t, "s3")
	ctx := context.Background()
	srv := testrig.StartS3(t)
	if err := srv.MakeBucket("pauses"); err != nil {
		t.Fatal(err)
	}
	objects, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, AccessKeyID: srv.AccessKey, SecretAccessKey: objstore.Secret(srv.SecretKey)})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := supervisor.Template{Name: supervisor.DefaultTemplate, Driver: "microvm", Memory: supervisor.Size(pauseLimits.MemoryBytes),
		CPUs: 1, Pids: 64, Disk: supervisor.Size(pauseLimits.DiskBytes), Tmp: supervisor.Size(pauseLimits.TmpBytes),
		TTL: supervisor.Duration(10 * time.Minute), PausedTTL: supervisor.Duration(time.Hour)}
	daemon := func() *supervisor.Supervisor {
		dir := t.TempDir()
		st, err := store.Open(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := s3store.Open(ctx, objects, "pauses", "shared/")
		if err != nil {
			t.Fatal(err)
		}
		sup, err := supervisor.New(supervisor.Options{
			Store: st, Drivers: map[string]sandbox.Driver{"microvm": newDriver(t, Options{StateDir: dir})}, Snapshots: snaps,
			Config: supervisor.Config{StateDir: dir, Templates: []supervisor.Template{tmpl}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = sup.Close(context.Background())
			st.Close()
		})
		return sup
	}
	a, b := daemon(), daemon()
	caller := supervisor.Caller{KeyID: "key-test"}
	info, err := a.Create(ctx, caller, supervisor.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill(ctx, caller, info.ID)
	defer a.Kill(ctx, caller, info.ID)
	if _, err := a.StartProcess(ctx, caller, info.ID, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{Argv: []string{"python3", "-c", pauseServer}}}); err != nil {
		t.Fatal(err)
	}
	fetch := func(sup *supervisor.Supervisor) string {
		t.Helper()
		var out bytes.Buffer
		res, err := sup.Exec(ctx, caller, info.ID, supervisor.ExecRequest{Argv: []string{"python3", "-c", pauseFetch}, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("fetch: %+v, %v", res, err)
		}
		return strings.TrimSpace(out.String())
	}
	secret := fetch(a)
	if len(secret) != 16 {
		t.Fatalf("the server answered %q", secret)
	}
	t0 := time.Now()
	p, err := a.Pause(ctx, caller, info.ID)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	pause := time.Since(t0)
	if p.Paused == nil || p.Paused.Stored == nil {
		t.Fatalf("the pause is not in the bucket: %+v", p.Paused)
	}
	if g, err := b.Get(ctx, caller, info.ID); err != nil || g.State != store.StatePaused {
		t.Fatalf("on the other daemon before its resume: %+v, %v", g, err)
	}
	t0 = time.Now()
	if _, err := b.Resume(ctx, caller, info.ID); err != nil {
		t.Fatalf("resume on the other daemon: %v", err)
	}
	resume := time.Since(t0)
	if got := fetch(b); got != secret {
		t.Fatalf("moved, the server answered %q, before %q", got, secret)
	}
	if _, err := a.Resume(ctx, caller, info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("resume on the daemon it moved from: %v", err)
	}
	t.Logf("pause with the upload %v (image %d MiB), resume on the other daemon with the download %v", pause.Round(time.Millisecond), p.Paused.Bytes>>20, resume.Round(time.Millisecond))
}
