package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

type fixture struct {
	sup *Supervisor
	st  *store.Store
	drv *fake.Driver
	mem *atomic.Int64
	dir string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	dir := t.TempDir()
	return openFixture(t, dir, cfg, &fake.Driver{})
}

func openFixture(t *testing.T, dir string, cfg Config, drv *fake.Driver) *fixture {
	t.Helper()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem := &atomic.Int64{}
	mem.Store(64 << 30)
	sup, err := New(Options{
		Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Config: cfg,
		MemAvailable: func() (int64, error) { return mem.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sup.Close(context.Background())
		st.Close()
	})
	return &fixture{sup: sup, st: st, drv: drv, mem: mem, dir: dir}
}

var alice = Caller{KeyID: "key-alice"}
var bob = Caller{KeyID: "key-bob"}

func TestCreateGetListKill(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if in.State != store.StateRunning || in.Owner != alice.KeyID || in.Limits.MemoryBytes != 64<<20 || in.Template != DefaultTemplate {
		t.Fatalf("created %+v", in)
	}
	if got := f.drv.Specs()[0].Limits.Lifetime; got != driverLifetime {
		t.Errorf("driver lifetime %v: the supervisor must own the TTL", got)
	}
	if _, err := f.sup.Get(ctx, bob, in.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob sees alice's sandbox: %v", err)
	}
	if _, err := f.sup.Exec(ctx, bob, in.ID, ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob execs in alice's sandbox: %v", err)
	}
	if err := f.sup.Kill(ctx, bob, in.ID); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob kills alice's sandbox: %v", err)
	}
	if l, _ := f.sup.List(ctx, bob, Filter{}); len(l) != 0 {
		t.Errorf("bob lists %d sandboxes of alice", len(l))
	}
	if l, _ := f.sup.List(ctx, Caller{KeyID: "op", Operator: true}, Filter{}); len(l) != 1 {
		t.Errorf("an operator lists %d sandboxes, want 1", len(l))
	}
	if err := f.sup.Kill(ctx, alice, in.ID); err != nil {
		t.Fatal(err)
	}
	got, err := f.sup.Get(ctx, alice, in.ID)
	if err != nil || got.State != store.StateDestroyed || got.EndReason != "deleted" {
		t.Fatalf("after kill: %+v, %v", got, err)
	}
	if _, err := f.sup.Exec(ctx, alice, in.ID, ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec in a destroyed sandbox: %v", err)
	}
	if err := f.sup.Kill(ctx, alice, in.ID); err != nil {
		t.Errorf("second kill: %v", err)
	}
	if l, _ := f.sup.List(ctx, alice, Filter{State: store.StateRunning}); len(l) != 0 {
		t.Errorf("state filter: %d running", len(l))
	}
	if _, err := f.sup.Get(ctx, alice, "../etc"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("bad id: %v", err)
	}
}

func TestNarrowing(t *testing.T) {
	tmpl := Template{Name: "t", Driver: "native", Memory: 256 << 20, CPUs: 1, Pids: 32, TTL: Duration(time.Minute), MaxTTL: Duration(time.Hour), IdleTimeout: Duration(time.Minute)}
	f := newFixture(t, Config{Templates: []Template{tmpl}})
	for _, tc := range []struct {
		name string
		req  CreateRequest
		ok   bool
	}{
		{"template as is", CreateRequest{Template: "t"}, true},
		{"less memory", CreateRequest{Template: "t", Limits: sandbox.Limits{MemoryBytes: 128 << 20}}, true},
		{"memory at the template's", CreateRequest{Template: "t", Limits: sandbox.Limits{MemoryBytes: 256 << 20}}, true},
		{"more memory", CreateRequest{Template: "t", Limits: sandbox.Limits{MemoryBytes: 256<<20 + 1}}, false},
		{"more cpus", CreateRequest{Template: "t", Limits: sandbox.Limits{CPUs: 1.5}}, false},
		{"more pids", CreateRequest{Template: "t", Limits: sandbox.Limits{Pids: 33}}, false},
		{"negative pids", CreateRequest{Template: "t", Limits: sandbox.Limits{Pids: -1}}, false},
		{"ttl at max", CreateRequest{Template: "t", TTL: time.Hour}, true},
		{"ttl past max", CreateRequest{Template: "t", TTL: time.Hour + time.Second}, false},
		{"idle past template's", CreateRequest{Template: "t", IdleTimeout: 2 * time.Minute}, false},
		{"bad env", CreateRequest{Template: "t", Env: []string{"NOEQUALS"}}, false},
		{"unknown template", CreateRequest{Template: "nope"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := f.sup.Create(context.Background(), Caller{KeyID: tc.name}, tc.req)
			if tc.ok != (err == nil) {
				t.Fatalf("create: %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				if in.Limits.MemoryBytes > 256<<20 || in.Limits.Pids > 32 {
					t.Errorf("limits wider than the template: %+v", in.Limits)
				}
			} else if !errors.Is(err, sandbox.ErrInvalid) && !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("error class: %v", err)
			}
		})
	}
}

func TestQuota(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	// Each sandbox of 100 MiB of memory can pin 484 MiB with the default
	// tmpfs sizes (256 MiB /workspace, 64 MiB /tmp and /dev/shm).
	c := Caller{KeyID: "k", Quota: store.Quota{MaxSandboxes: 2, MaxMemoryBytes: 968 << 20}}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 100 << 20}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 101 << 20}}); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("memory quota: %v", err)
	}
	in, err := f.sup.Create(ctx, c, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 100 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 4 << 20}}); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "2 live sandboxes") {
		t.Fatalf("count quota: %v", err)
	}
	if _, err := f.sup.Create(ctx, bob, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 100 << 20}}); err != nil {
		t.Fatalf("another key is not bound by k's quota: %v", err)
	}
	if err := f.sup.Kill(ctx, c, in.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.Create(ctx, c, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 100 << 20}}); err != nil {
		t.Fatalf("after a delete the quota has room again: %v", err)
	}
}

func TestAdmission(t *testing.T) {
	f := newFixture(t, Config{MemoryReserve: 256 << 20})
	f.mem.Store(1 << 30) // 1 GiB available, 256 MiB reserve: 768 MiB for sandboxes
	ctx := context.Background()
	// 448 MiB of memory, 32 MiB /workspace, 16 MiB /tmp and /dev/shm: 512 MiB.
	half := sandbox.Limits{MemoryBytes: 448 << 20, DiskBytes: 32 << 20, TmpBytes: 16 << 20}
	if _, err := f.sup.Create(ctx, alice, CreateRequest{Limits: half}); err != nil {
		t.Fatal(err)
	}
	_, err := f.sup.Create(ctx, bob, CreateRequest{Limits: half})
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("overcommit admitted: %v", err)
	}
	for _, want := range []string{"512 MiB", "256 MiB is free", "1 live sandboxes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := f.sup.Create(ctx, bob, CreateRequest{Limits: sandbox.Limits{MemoryBytes: 192 << 20, DiskBytes: 32 << 20, TmpBytes: 16 << 20}}); err != nil {
		t.Fatalf("what fits is admitted: %v", err)
	}
}

func TestReaperTTLAndIdle(t *testing.T) {
	tmpl := Template{Name: "default", TTL: Duration(time.Hour), IdleTimeout: Duration(time.Hour)}
	f := newFixture(t, Config{Templates: []Template{tmpl}})
	now := time.Now()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	f.sup.opts.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	ctx := context.Background()
	ttl, _ := f.sup.Create(ctx, alice, CreateRequest{TTL: 10 * time.Second, IdleTimeout: time.Hour})
	idle, _ := f.sup.Create(ctx, alice, CreateRequest{IdleTimeout: 5 * time.Second})
	busy, _ := f.sup.Create(ctx, alice, CreateRequest{IdleTimeout: 5 * time.Second})
	// A foreground exec in flight keeps its sandbox from idling.
	execDone := make(chan error, 1)
	ectx, stop := context.WithCancel(ctx)
	go func() {
		_, err := f.sup.Exec(ectx, alice, busy.ID, ExecRequest{Argv: []string{"sleep"}})
		execDone <- err
	}()
	waitFor(t, func() bool { return f.sup.live[busy.ID].busy.Load() == 1 })

	clock.Add(int64(4 * time.Second))
	if n := f.sup.ReapExpired(); n != 0 {
		t.Fatalf("reaped %d before any deadline", n)
	}
	clock.Add(int64(2 * time.Second)) // 6 s: idle passed its idle timeout
	if n := f.sup.ReapExpired(); n != 1 {
		t.Fatalf("reaped %d at 6 s, want the idle one", n)
	}
	if in, _ := f.sup.Get(ctx, alice, idle.ID); in.State != store.StateDestroyed || in.EndReason != "idle" {
		t.Fatalf("idle sandbox: %+v", in)
	}
	// ExtendTimeout moves the TTL deadline.
	if _, err := f.sup.ExtendTimeout(ctx, alice, ttl.ID, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.sup.ExtendTimeout(ctx, alice, ttl.ID, 25*time.Hour); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("extend past max_ttl: %v", err)
	}
	clock.Add(int64(10 * time.Second)) // 16 s: past the first TTL, not the extended one
	f.sup.ReapExpired()
	if in, _ := f.sup.Get(ctx, alice, ttl.ID); in.State != store.StateRunning {
		t.Fatalf("extended sandbox reaped: %+v", in)
	}
	clock.Add(int64(15 * time.Second)) // 31 s
	f.sup.ReapExpired()
	if in, _ := f.sup.Get(ctx, alice, ttl.ID); in.State != store.StateDestroyed || in.EndReason != "ttl" {
		t.Fatalf("sandbox past its TTL: %+v", in)
	}
	if in, _ := f.sup.Get(ctx, alice, busy.ID); in.State != store.StateRunning {
		t.Fatalf("busy sandbox reaped as idle: %+v", in)
	}
	stop()
	<-execDone
	clock.Add(int64(6 * time.Second))
	f.sup.ReapExpired()
	if in, _ := f.sup.Get(ctx, alice, busy.ID); in.State != store.StateDestroyed {
		t.Fatalf("sandbox idle after its exec: %+v", in)
	}
	if got := counterValue(t, f.sup.m.Kills.WithLabelValues("idle")); got != 2 {
		t.Errorf("kills{reason=idle} = %v, want 2", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPool(t *testing.T) {
	tmpl := Template{Name: "py", Pool: 2, Memory: 64 << 20}
	f := newFixture(t, Config{Templates: []Template{tmpl}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.sup.Run(ctx)
	ready := func() int { return f.sup.Pools()[0].Ready }
	waitFor(t, func() bool { return ready() == 2 })
	// Pooled sandboxes are nobody's.
	if l, _ := f.sup.List(ctx, alice, Filter{}); len(l) != 0 {
		t.Fatalf("alice sees pooled sandboxes: %+v", l)
	}
	in, err := f.sup.Create(ctx, alice, CreateRequest{Template: "py", TTL: time.Minute})
	if err != nil || !in.FromPool || in.Owner != alice.KeyID || in.State != store.StateRunning {
		t.Fatalf("claim: %+v, %v", in, err)
	}
	if in.ExpiresAt.Before(time.Now().Add(50 * time.Second)) {
		t.Errorf("a claimed sandbox's TTL counts from the claim: expires %v", in.ExpiresAt)
	}
	rec, _ := f.st.GetSandbox(in.ID)
	if rec.Owner != alice.KeyID || rec.State != store.StateRunning {
		t.Errorf("claim not recorded: %+v", rec)
	}
	waitFor(t, func() bool { return ready() == 2 })
	// A request that narrows the template cannot be a claim.
	in2, err := f.sup.Create(ctx, alice, CreateRequest{Template: "py", Limits: sandbox.Limits{MemoryBytes: 32 << 20}})
	if err != nil || in2.FromPool {
		t.Fatalf("narrowed create: %+v, %v", in2, err)
	}
	if h, m := counterValue(t, f.sup.m.PoolHits.WithLabelValues("py")), counterValue(t, f.sup.m.PoolMisses.WithLabelValues("py")); h != 1 || m != 1 {
		t.Errorf("pool hits %v misses %v, want 1 and 1", h, m)
	}
	var m dto.Metric
	if err := f.sup.m.ClaimSeconds.(prometheus.Metric).Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("claim latency not measured")
	}
}

// TestRecover: a daemon died with sandboxes live; the next one marks them
// lost, asks the drivers to reap, and keeps ended records as they were.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, r := range []store.Sandbox{
		{ID: "sb-run", Owner: "k", State: store.StateRunning, Created: now, Driver: "native"},
		{ID: "sb-pool", State: store.StatePooled, Created: now, Driver: "native"},
		{ID: "sb-new", Owner: "k", State: store.StateCreating, Created: now, Driver: "native"},
		{ID: "sb-gone", Owner: "k", State: store.StateDestroyed, Created: now, Ended: now, EndReason: "deleted", Driver: "native"},
	} {
		if err := st.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	drv := &fake.Driver{}
	f := openFixture(t, dir, Config{}, drv)
	rep, err := f.sup.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Lost) != 3 || drv.Swept.Load() != 1 {
		t.Fatalf("recover: %+v, reaped %d", rep, drv.Swept.Load())
	}
	c := Caller{KeyID: "k"}
	for id, want := range map[string]store.State{"sb-run": store.StateLost, "sb-new": store.StateLost, "sb-gone": store.StateDestroyed} {
		in, err := f.sup.Get(context.Background(), c, id)
		if err != nil || in.State != want {
			t.Errorf("%s: %+v, %v; want %s", id, in, err, want)
		}
	}
	if _, err := f.sup.Exec(context.Background(), c, "sb-run", ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec in a lost sandbox: %v", err)
	}
	if ids := f.sup.LiveIDs(); len(ids) != 0 {
		t.Errorf("live after recover: %v", ids)
	}
}

func TestProcesses(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	in, _ := f.sup.Create(ctx, alice, CreateRequest{})
	p, err := f.sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"cat"}, Stdin: []byte("hello ")}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.sup.WriteStdin(ctx, alice, in.ID, p.ID, []byte("world"), true); err != nil {
		t.Fatal(err)
	}
	w, err := f.sup.Wait(ctx, alice, in.ID, p.ID)
	if err != nil || w.Running || string(w.Stdout) != "hello world" {
		t.Fatalf("wait: %+v %q, %v", w, w.Stdout, err)
	}
	s, _ := f.sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}}})
	ps, _ := f.sup.Processes(ctx, alice, in.ID)
	if len(ps) != 2 || ps[1].ID != s.ID || !ps[1].Running {
		t.Fatalf("list: %+v", ps)
	}
	if err := f.sup.Signal(ctx, bob, in.ID, s.ID, syscall.SIGKILL); !errors.Is(err, ErrForbidden) {
		t.Fatalf("bob signals alice's process: %v", err)
	}
	if err := f.sup.Signal(ctx, alice, in.ID, s.ID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w, _ = f.sup.Wait(ctx, alice, in.ID, s.ID)
	if w.Result == nil || w.Result.Reason != sandbox.ReasonKilled {
		t.Fatalf("killed process: %+v", w)
	}
	if err := f.sup.WriteStdin(ctx, alice, in.ID, s.ID, []byte("x"), false); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("stdin of a process without keep_stdin_open: %v", err)
	}
	if _, err := f.sup.Wait(ctx, alice, in.ID, "e99"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("unknown process: %v", err)
	}
}

func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		lang string
		ok   bool
		arg0 string
	}{{"python", true, "python3"}, {"bash", true, "bash"}, {"sh", true, "sh"}, {"ruby", false, ""}, {"", false, ""}} {
		argv, err := Command(tc.lang, "x")
		if (err == nil) != tc.ok || (tc.ok && argv[0] != tc.arg0) {
			t.Errorf("Command(%q) = %v, %v", tc.lang, argv, err)
		}
	}
	if _, err := Command("sh", strings.Repeat("x", maxCode+1)); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("oversized code accepted: %v", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(`
reap_interval = "200ms"
memory_reserve = "1G"
allowed_hosts = ["airlock.internal"]

[[template]]
name = "default"

[[template]]
name = "python"
memory = "256M"
cpus = 0.25
ttl = "10m"
idle_timeout = "1m"
pool = 3
`), 0o644)
	c, err := LoadConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	py := c.Templates[1]
	if time.Duration(c.ReapInterval) != 200*time.Millisecond || c.MemoryReserve != 1<<30 || py.Memory != 256<<20 || py.Pool != 3 || py.Driver != "native" || time.Duration(py.MaxTTL) != DefaultMaxTTL {
		t.Fatalf("config: %+v", c)
	}
	for name, body := range map[string]string{
		"unknown key":   "colour = \"blue\"\n",
		"bad size":      "[[template]]\nname = \"a\"\nmemory = \"lots\"\n",
		"bad name":      "[[template]]\nname = \"A/B\"\n",
		"twice":         "[[template]]\nname = \"a\"\n[[template]]\nname = \"a\"\n",
		"tiny memory":   "[[template]]\nname = \"a\"\nmemory = \"1k\"\n",
		"ttl past max":  "[[template]]\nname = \"a\"\nttl = \"2h\"\nmax_ttl = \"1h\"\n",
		"bad duration":  "reap_interval = \"soon\"\n",
		"negative pool": "[[template]]\nname = \"a\"\npool = -1\n",
	} {
		p := filepath.Join(dir, "bad.toml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDriverErrorsKeepHostPathsOut(t *testing.T) {
	f := newFixture(t, Config{})
	f.drv.Fail = fmt.Errorf("root /srv/secret/rootfs: %w", sandbox.ErrNotFound)
	_, err := f.sup.Create(context.Background(), alice, CreateRequest{})
	if err == nil || strings.Contains(err.Error(), "/srv") || errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("driver error reaches the caller as %v", err)
	}
	f.drv.Fail = &sandbox.LayerError{Layer: sandbox.LayerSeccomp, Why: "no seccomp", Fix: "rebuild the kernel"}
	_, err = f.sup.Create(context.Background(), alice, CreateRequest{})
	var le *sandbox.LayerError
	if !errors.As(err, &le) {
		t.Fatalf("a missing layer must say which: %v", err)
	}
	if ids := f.sup.LiveIDs(); len(ids) != 0 {
		t.Fatalf("failed creates left %v", ids)
	}
	if recs, _ := f.st.Sandboxes(nil); len(recs) != 0 {
		t.Fatalf("failed creates left records %+v", recs)
	}
}
