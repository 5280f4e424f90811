package microvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// holdServer keeps HOLD MiB of random bytes in a Python process and
// serves a digest of them on 127.0.0.1:8000; /tmp/held says it is full.
const holdServer = `import http.server, hashlib, os
data = bytearray(HOLD << 20)
for i in range(HOLD): data[i << 20:(i + 1) << 20] = os.urandom(1 << 20)
digest = hashlib.sha256(data).hexdigest()[:16]
open('/tmp/held', 'w').close()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write((digest[:8] + '%08x' % (sum(data[::4096]) & 0xffffffff)).encode())
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
`

// holdingSandbox makes a 256 MiB guest whose server holds holdMiB of
// random bytes, and returns it with the server's digest of them.
func holdingSandbox(t *testing.T, d *Driver, holdMiB int) (sandbox.Instance, string) {
	t.Helper()
	ctx := t.Context()
	in, err := d.Create(ctx, sandbox.Spec{Limits: pauseLimits})
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(holdServer, "HOLD", strconv.Itoa(holdMiB))
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", script}, Background: true}); err != nil {
		in.Close(context.Background())
		t.Fatal(err)
	}
	wait := sandbox.ExecRequest{Argv: []string{"sh", "-c", "for i in $(seq 3000); do [ -e /tmp/held ] && exit 0; sleep 0.1; done; exit 1"}, Timeout: 5 * time.Minute}
	if res, err := sandbox.Run(ctx, in, wait); err != nil || res.ExitCode != 0 {
		in.Close(context.Background())
		t.Fatalf("the server did not fill its memory: %v %+v", err, res)
	}
	return in, fetchSecret(t, in)
}

// processPss reads a process's PSS, RSS and PSS of shared memory (a
// memfd's pages) from smaps_rollup, in bytes.
func processPss(t *testing.T, pid int) (pss, rss, shmem int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "Pss":
			pss = n << 10
		case "Rss":
			rss = n << 10
		case "Pss_Shmem":
			shmem = n << 10
		}
	}
	return pss, rss, shmem
}

// forkRound is one live fork of a source into clones, measured.
type forkRound struct {
	checkpoint time.Duration   // the driver's Checkpoint (the conversion included)
	first      []time.Duration // each clone's start to its first exec, all started at once
	total      time.Duration   // the checkpoint's start to the last clone's first exec
	pss, rss   []int64         // each clone's QEMU
	image      int64           // the shared memory image's pages (a memfd)
	mapped     int64           // of which the clones map (their PSS of shared memory)
}

// host is what the fork's clones hold on the host: their PSS and the
// image's pages none of them maps.
func (r forkRound) host() int64 { return r.pssSum() + r.image - r.mapped }

func (r forkRound) String() string {
	var sum, sumRSS int64
	per := make([]string, len(r.pss))
	for i, p := range r.pss {
		sum += p
		sumRSS += r.rss[i]
		per[i] = strconv.FormatInt(p>>20, 10)
	}
	firsts := make([]string, len(r.first))
	for i, f := range r.first {
		firsts[i] = f.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("host %d MiB: PSS sum %d MiB (per clone %s MiB), RSS sum %d MiB, shared image %d MiB (%d MiB of it mapped); checkpoint %v, clones to a first exec %s, fork to the last clone's first exec %v",
		r.host()>>20, sum>>20, strings.Join(per, " "), sumRSS>>20, r.image>>20, r.mapped>>20, r.checkpoint.Round(time.Millisecond), strings.Join(firsts, " "), r.total.Round(time.Millisecond))
}

func (r forkRound) pssSum() (s int64) {
	for _, p := range r.pss {
		s += p
	}
	return s
}

// liveFork forks in into n clones started at once, checks them (the
// source's memory, identities of their own, writes of their own),
// measures it, and closes them.
func liveFork(t *testing.T, d *Driver, in sandbox.Instance, secret string, n int) forkRound {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	var r forkRound
	t0 := time.Now()
	st, _, err := d.Checkpoint(ctx, in, dir)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	r.checkpoint = time.Since(t0)
	clones := make([]sandbox.Instance, n)
	errs := make([]error, n)
	r.first = make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c0 := time.Now()
			c, err := d.Clone(ctx, sandbox.Spec{ID: sandbox.NewID()}, st, dir)
			if err == nil {
				_, err = sandbox.Run(ctx, c, sandbox.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute})
			}
			clones[i], errs[i], r.first[i] = c, err, time.Since(c0)
		})
	}
	wg.Wait()
	r.total = time.Since(t0)
	d.mu.Lock()
	if mem := d.forks[filepath.Clean(dir)]; mem != nil {
		var fs unix.Stat_t
		if unix.Fstat(int(mem.Fd()), &fs) == nil {
			r.image = fs.Blocks * 512
		}
	}
	d.mu.Unlock()
	d.ReleaseCheckpoint(dir)
	// The next fork's clones start on a host without these.
	defer func() {
		for _, c := range clones {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	for i := range clones {
		if errs[i] != nil {
			t.Fatalf("clone %d: %v", i, errs[i])
		}
	}
	seen := map[string]bool{}
	for i, c := range clones {
		if got := fetchSecret(t, c); got != secret {
			t.Fatalf("clone %d's server answered %q, the source's %q", i, got, secret)
		}
		// A write of its own, which no other clone sees.
		sh(t, c, "test ! -e /tmp/mine && echo "+c.ID()+" > /tmp/mine")
		id := strings.Fields(sh(t, c, "cat /tmp/mine; hostname; cat /etc/machine-id; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"))
		if len(id) != 4 || id[0] != c.ID() || id[1] != c.ID() {
			t.Fatalf("clone %d (%s): its file and host name: %q", i, c.ID(), id)
		}
		for _, v := range id[2:] {
			if seen[v] {
				t.Fatalf("clone %d shares a machine id or random output with another: %q", i, id)
			}
			seen[v] = true
		}
	}
	if got := strings.TrimSpace(sh(t, in, "cat /tmp/mine 2>/dev/null || echo none")); got != "none" {
		t.Fatalf("the source sees a clone's file: %q", got)
	}
	for _, c := range clones {
		pss, rss, shmem := processPss(t, hostOf(c).vm.Pid)
		r.pss, r.rss = append(r.pss, pss), append(r.rss, rss)
		if r.image > 0 {
			r.mapped += shmem
		}
	}
	d.mu.Lock()
	held := len(d.forks)
	d.mu.Unlock()
	if held != 0 {
		t.Fatalf("the driver holds %d checkpoints' memory after their release", held)
	}
	return r
}

// TestLiveForkShares forks a 256 MiB guest holding 64 MiB of random bytes
// into 4 clones twice, with each clone loading the whole checkpoint (as
// before clones shared memory) and with the checkpoint converted for
// them to share, and compares the clones' host PSS. Every clone answers
// the source's digest of its memory, has its own identity, and sees
// only its own writes. AIRLOCK_LIVEFORK_ROUNDS repeats the pair
// (alternated), AIRLOCK_LIVEFORK_CLONES sets the clones per fork.
func TestLiveForkShares(t *testing.T) {
	d := newDriver(t, Options{})
	rounds, clones := envInt("AIRLOCK_LIVEFORK_ROUNDS", 1), envInt("AIRLOCK_LIVEFORK_CLONES", 4)
	in, secret := holdingSandbox(t, d, 64)
	defer in.Close(context.Background())
	defer func() { shareForks = true }()
	var whole, shared []forkRound
	for i := range rounds {
		for _, share := range []bool{false, true} {
			shareForks = share
			r := liveFork(t, d, in, secret, clones)
			t.Logf("round %d, shared %v: %v", i+1, share, r)
			if share {
				shared = append(shared, r)
			} else {
				whole = append(whole, r)
			}
		}
	}
	// One clone alone maps all it touches of the image: sharing shows
	// from two on.
	for i := range rounds {
		if a, b := whole[i].host(), shared[i].host(); clones > 1 && b > a*3/4 {
			t.Errorf("round %d: %d clones sharing the checkpoint's memory hold %d MiB on the host, loading it whole %d MiB", i+1, clones, b>>20, a>>20)
		}
	}
}

// envInt is the environment's integer name, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestLiveForkWholeImage: a clone of a checkpoint whose shared memory
// the driver no longer holds (released, or a conversion that failed)
// loads the whole image, saved without x-ignore-shared, and runs on.
func TestLiveForkWholeImage(t *testing.T) {
	t.Parallel() // beside the other machine tests marked so, after the rest (parallelTests in microvm_linux_test.go)
	d := newDriver(t, Options{})
	ctx := t.Context()
	in, secret := pausedSandbox(t, d, pauseLimits)
	defer in.Close(context.Background())
	dir := t.TempDir()
	st, _, err := d.Checkpoint(ctx, in, dir)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, forkDevices)); err != nil {
		t.Fatalf("the checkpoint was not converted: %v", err)
	}
	d.ReleaseCheckpoint(dir)
	clone, err := d.Clone(ctx, sandbox.Spec{ID: sandbox.NewID()}, st, dir)
	if err != nil {
		t.Fatalf("clone: %v", err)
	}
	defer clone.Close(context.Background())
	if got := fetchSecret(t, clone); got != secret {
		t.Fatalf("the clone's server answered %q, the source's %q", got, secret)
	}
}
