package gvisor

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// identityOf reads what tells sandboxes apart, as the workload sees it:
// the machine id, the host name (uname and /etc/hostname) and 32 bytes
// of /dev/urandom.
func identityOf(t *testing.T, in sandbox.Instance) []string {
	t.Helper()
	out := run(t, in, "sh", "-c", "cat /etc/machine-id; hostname; cat /etc/hostname; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo")
	f := strings.Fields(out)
	if len(f) != 4 || len(f[0]) != 32 || f[1] != f[2] {
		t.Fatalf("the sandbox's identity: %q", out)
	}
	return f
}

// TestLiveFork forks a sandbox whose background Python server holds a
// random number only in its memory into two clones at once: the source
// runs on throughout, and each of the three answers the number, with a
// machine id, host name and random bytes of its own.
func TestLiveFork(t *testing.T) {
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
	src := identityOf(t, in)
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", server}, Background: true}); err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(run(t, in, "python3", "-c", fetch))
	if len(secret) != 16 {
		t.Fatalf("the server answered %q", secret)
	}
	run(t, in, "rm", "/tmp/secret") // only the process's memory has it now
	dir := t.TempDir()
	t0 := time.Now()
	st, back, err := d.Checkpoint(ctx, in, dir)
	if back == nil {
		t.Fatalf("the source was lost: %v", err)
	}
	in = back
	defer in.Close(ctx)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	t.Logf("checkpoint --leave-running: %v, image %d bytes", time.Since(t0), dirBytes(t, dir))
	// The source ran on: its server answers from its memory.
	if got := strings.TrimSpace(run(t, in, "python3", "-c", fetch)); got != secret {
		t.Fatalf("the source answered %q after the checkpoint, %q before", got, secret)
	}

	clones := make([]sandbox.Instance, 2)
	errs := make([]error, 2)
	var cw sync.WaitGroup
	t0 = time.Now()
	for i := range clones {
		cw.Add(1)
		go func() {
			defer cw.Done()
			c, err := d.Clone(ctx, sandbox.Spec{ID: "clone" + string(rune('a'+i)) + "-" + in.ID()}, st, dir)
			if err == nil {
				run(t, c, "true")
			}
			clones[i], errs[i] = c, err
		}()
	}
	cw.Wait()
	t.Logf("two clones at once, to a first exec in each: %v", time.Since(t0))
	for i, c := range clones {
		if errs[i] != nil {
			t.Fatalf("clone %d: %v", i, errs[i])
		}
		defer c.Close(ctx)
	}
	if got := strings.TrimSpace(run(t, in, "python3", "-c", fetch)); got != secret {
		t.Fatalf("the source answered %q after the fork, %q before", got, secret)
	}
	seen := map[string]string{}
	for i, f := range [][]string{src, identityOf(t, in), identityOf(t, clones[0]), identityOf(t, clones[1])} {
		if i == 1 {
			if f[0] != src[0] || f[1] != src[1] {
				t.Errorf("the source's identity changed in the fork: %v, before %v", f, src)
			}
			continue
		}
		for _, v := range f[:2] {
			if prev, ok := seen[v]; ok {
				t.Errorf("sandbox %d shares %q with %s", i, v, prev)
			}
			seen[v] = "sandbox " + string(rune('0'+i))
		}
	}
	rnd := map[string]bool{}
	for _, s := range []sandbox.Instance{in, clones[0], clones[1]} {
		r := identityOf(t, s)[3]
		if rnd[r] {
			t.Errorf("two sandboxes read the same bytes from /dev/urandom: %s", r)
		}
		rnd[r] = true
	}
	for i, c := range clones {
		if h := identityOf(t, c)[1]; h != c.ID() {
			t.Errorf("clone %d's host name is %q, not its id %s", i, h, c.ID())
		}
		if got := strings.TrimSpace(run(t, c, "python3", "-c", fetch)); got != secret {
			t.Errorf("clone %d's server answered %q, the source's %q", i, got, secret)
		}
	}
}
