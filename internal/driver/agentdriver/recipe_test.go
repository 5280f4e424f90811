package agentdriver

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The host side of every agent driver, driven without root: a fake agent
// served in this process over net.Pipe, and a fake host.

// fakeAgent serves the agent's protocol. Each exec's behaviour is its
// argv[0]:
//
//	sleep   runs until it is killed (SIGKILL through Signal)
//	flood   prints 1 MiB, then runs until it is killed
//	linger  runs until it is killed, ignoring its timeout (the agent's
//	        enforcement is broken: the host's backstop must act)
//	echo    prints its arguments and exits 0
type fakeAgent struct {
	version    int
	persistent bool

	mu      sync.Mutex
	kills   map[string]chan struct{}
	signals []string // the exec ids SIGKILL was sent to
	conn    net.Conn
}

func newFakeAgent() *fakeAgent {
	return &fakeAgent{version: agent.Version, kills: map[string]chan struct{}{}}
}

// serve starts the agent on one end of a pipe and returns the host's end.
func (a *fakeAgent) serve(t *testing.T) net.Conn {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	a.conn = agentEnd
	mux := http.NewServeMux()
	o := agent.HandlerOptions()
	mux.Handle(agent.ProcHello, connect.NewUnaryHandler(agent.ProcHello, func(_ context.Context, _ *connect.Request[agent.HelloRequest]) (*connect.Response[agent.HelloResponse], error) {
		return connect.NewResponse(&agent.HelloResponse{Version: a.version, Persistent: a.persistent, Layers: []sandbox.Layer{sandbox.LayerSeccomp}}), nil
	}, o...))
	mux.Handle(agent.ProcSignal, connect.NewUnaryHandler(agent.ProcSignal, func(_ context.Context, r *connect.Request[agent.SignalRequest]) (*connect.Response[agent.Empty], error) {
		if r.Msg.Signal == int(syscall.SIGKILL) {
			a.mu.Lock()
			a.signals = append(a.signals, r.Msg.ID)
			if c, ok := a.kills[r.Msg.ID]; ok {
				delete(a.kills, r.Msg.ID)
				close(c)
			}
			a.mu.Unlock()
		}
		return connect.NewResponse(&agent.Empty{}), nil
	}, o...))
	for _, p := range []string{agent.ProcForget} {
		mux.Handle(p, connect.NewUnaryHandler(p, func(context.Context, *connect.Request[agent.ForgetRequest]) (*connect.Response[agent.Empty], error) {
			return connect.NewResponse(&agent.Empty{}), nil
		}, o...))
	}
	mux.Handle(agent.ProcList, connect.NewUnaryHandler(agent.ProcList, func(context.Context, *connect.Request[agent.Empty]) (*connect.Response[agent.ExecList], error) {
		return connect.NewResponse(&agent.ExecList{}), nil
	}, o...))
	mux.Handle(agent.ProcExec, connect.NewBidiStreamHandler(agent.ProcExec, a.exec, o...))
	ctx, cancel := context.WithCancel(context.Background())
	go agent.ServeConn(ctx, agentEnd, mux)
	t.Cleanup(func() { cancel(); agentEnd.Close() })
	return hostEnd
}

func (a *fakeAgent) exec(ctx context.Context, s *connect.BidiStream[agent.ExecInput, agent.ExecEvent]) error {
	in, err := s.Receive()
	if err != nil || in.Start == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no start"))
	}
	st := in.Start
	killed := make(chan struct{})
	a.mu.Lock()
	a.kills[st.ID] = killed
	a.mu.Unlock()
	if err := s.Send(&agent.ExecEvent{Started: 2}); err != nil {
		return err
	}
	started := time.Now()
	waitKill := func() error {
		select {
		case <-killed:
		case <-ctx.Done():
			return ctx.Err()
		}
		return s.Send(&agent.ExecEvent{Exit: &sandbox.Result{ExitCode: -1, Signal: "SIGKILL", LimitsHit: []sandbox.Limit{},
			Usage: sandbox.Usage{WallMS: time.Since(started).Milliseconds()}}})
	}
	switch st.Argv[0] {
	case "echo":
		if err := s.Send(&agent.ExecEvent{Stdout: []byte(strings.Join(st.Argv[1:], " ") + "\n")}); err != nil {
			return err
		}
		return s.Send(&agent.ExecEvent{Exit: &sandbox.Result{Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{}}})
	case "flood":
		chunk := bytes.Repeat([]byte("x"), agent.ChunkSize)
		for range 32 {
			if err := s.Send(&agent.ExecEvent{Stdout: chunk}); err != nil {
				return err
			}
		}
		return waitKill()
	default: // sleep, linger
		return waitKill()
	}
}

func (a *fakeAgent) signalled() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.signals...)
}

// fakeHost is a Host whose kills go through the agent (as gVisor's,
// a VM's or a Pod's do).
type fakeHost struct {
	conn      net.Conn
	lock      *hostlock.Lock
	done      chan struct{}
	doneOnce  sync.Once
	death     *Death
	mu        sync.Mutex
	teardowns int
}

func newFakeHost(conn net.Conn) *fakeHost { return &fakeHost{conn: conn, done: make(chan struct{})} }

func (h *fakeHost) Exec(string) ExecHost         { return SandboxCgroupDelta(nil) }
func (h *fakeHost) Done() <-chan struct{}        { return h.done }
func (h *fakeHost) Ended() *Death                { h.mu.Lock(); defer h.mu.Unlock(); return h.death }
func (h *fakeHost) end()                         { h.doneOnce.Do(func() { close(h.done) }) }
func (h *fakeHost) DriverState() ([]byte, error) { return []byte(`{}`), nil }
func (h *fakeHost) Teardown(context.Context) error {
	h.mu.Lock()
	h.teardowns++
	h.mu.Unlock()
	if h.conn != nil {
		h.conn.Close()
	}
	h.lock.Release()
	h.end()
	return nil
}

func (h *fakeHost) tornDown() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.teardowns
}

// die ends the environment by itself, for reason.
func (h *fakeHost) die(dt *Death) {
	h.mu.Lock()
	h.death = dt
	h.mu.Unlock()
	h.end()
}

func newRecipe(t *testing.T) *Recipe {
	t.Helper()
	r, err := NewRecipe("fake", Shared{StateDir: t.TempDir(), Persistent: true}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// create makes a sandbox of limits l through the recipe, over a fake agent.
func create(t *testing.T, r *Recipe, l sandbox.Limits) (*Instance, *fakeAgent, *fakeHost) {
	t.Helper()
	a := newFakeAgent()
	var h *fakeHost
	inst, err := r.Create(context.Background(), sandbox.Spec{Limits: l}, Steps{
		Caps: sandbox.Capabilities{Shell: true},
		Start: func(ctx context.Context, b *Build) (*agent.Client, []sandbox.Layer, error) {
			h = newFakeHost(a.serve(t))
			h.lock = b.Lock
			b.Host(h)
			return agent.Dial(ctx, h.conn)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in, a, h
}

func TestRunEcho(t *testing.T) {
	in, _, _ := create(t, newRecipe(t), sandbox.Limits{})
	var out bytes.Buffer
	res, err := sandbox.Run(context.Background(), in, sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Stdout: &out})
	if err != nil || res.Reason != sandbox.ReasonExit || out.String() != "hi\n" {
		t.Fatalf("run: %+v %v %q", res, err, out.String())
	}
	if !strings.HasPrefix(in.ID(), "sb-") {
		t.Errorf("id %q: Create gave none", in.ID())
	}
}

// A cancelled run kills the command through the agent and returns within
// KillWait.
func TestKillOnCancel(t *testing.T) {
	in, a, _ := create(t, newRecipe(t), sandbox.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	t0 := time.Now()
	res, err := sandbox.Run(ctx, in, sandbox.ExecRequest{Argv: []string{"sleep"}})
	took := time.Since(t0)
	if took > 100*time.Millisecond+sandbox.KillWait {
		t.Errorf("run returned %v after the cancel; KillWait is %v", took-100*time.Millisecond, sandbox.KillWait)
	}
	if res.Reason != sandbox.ReasonKilled || res.Signal != "SIGKILL" {
		t.Errorf("result %+v (%v), want killed by SIGKILL", res, err)
	}
	if s := a.signalled(); len(s) != 1 {
		t.Errorf("the agent was sent SIGKILL for %v, want the one exec", s)
	}
}

// Output past the limit is cut at the limit, and the command is killed
// for it.
func TestOutputCap(t *testing.T) {
	in, a, _ := create(t, newRecipe(t), sandbox.Limits{OutputBytes: 100 << 10})
	var out bytes.Buffer
	res, err := sandbox.Run(context.Background(), in, sandbox.ExecRequest{Argv: []string{"flood"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 100<<10 || !res.StdoutTruncated {
		t.Errorf("passed on %d bytes (truncated %v), want exactly the limit, %d", out.Len(), res.StdoutTruncated, 100<<10)
	}
	if res.Reason != sandbox.ReasonOutputLimit || len(a.signalled()) != 1 {
		t.Errorf("result %+v, kills %v: want output_limit, killed once", res, a.signalled())
	}
}

// An agent that does not enforce the timeout is overruled: the host kills
// the command 2 s past it.
func TestTimeoutBackstop(t *testing.T) {
	in, a, _ := create(t, newRecipe(t), sandbox.Limits{})
	t0 := time.Now()
	res, err := sandbox.Run(context.Background(), in, sandbox.ExecRequest{Argv: []string{"linger"}, Timeout: 200 * time.Millisecond})
	took := time.Since(t0)
	if err != nil || res.Reason != sandbox.ReasonTimeout {
		t.Fatalf("result %+v %v, want timeout", res, err)
	}
	if took < 2*time.Second || took > 4*time.Second {
		t.Errorf("killed after %v, want the timeout plus the 2 s backstop", took)
	}
	if len(a.signalled()) != 1 {
		t.Errorf("kills %v", a.signalled())
	}
}

// The sandbox's death while a command runs is the command's reason.
func TestDeathReason(t *testing.T) {
	for _, tc := range []struct {
		death  *Death
		reason sandbox.Reason
		limit  sandbox.Limit
	}{
		{&Death{Reason: sandbox.ReasonOOM, Msg: "out of memory"}, sandbox.ReasonOOM, sandbox.LimitMemory},
		{&Death{Reason: sandbox.ReasonPids, Msg: "too many processes"}, sandbox.ReasonPids, sandbox.LimitPids},
		{&Death{Reason: sandbox.ReasonError, Msg: "the agent crashed"}, sandbox.ReasonError, ""},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			in, a, h := create(t, newRecipe(t), sandbox.Limits{})
			p, err := in.Start(context.Background(), sandbox.ExecRequest{Argv: []string{"sleep"}})
			if err != nil {
				t.Fatal(err)
			}
			h.die(tc.death)
			a.conn.Close()
			res, err := p.Wait(context.Background())
			if err != nil || res.Reason != tc.reason {
				t.Fatalf("result %+v %v, want %s", res, err, tc.reason)
			}
			if tc.limit != "" && !res.Hit(tc.limit) {
				t.Errorf("limits hit %v, want %s", res.LimitsHit, tc.limit)
			}
			if !strings.Contains(res.Message, "sandbox") {
				t.Errorf("message %q says nothing of the sandbox's end", res.Message)
			}
			if err := in.Ended(); err == nil || !strings.Contains(err.Error(), tc.death.Msg) {
				t.Errorf("Ended: %v, want %q", err, tc.death.Msg)
			}
		})
	}
}

// A failed start leaves nothing: the host is torn down and the lock free.
func TestCreateRollback(t *testing.T) {
	r := newRecipe(t)
	h := newFakeHost(nil)
	var undone bool
	_, err := r.Create(context.Background(), sandbox.Spec{ID: "sb-rollback"}, Steps{
		Start: func(ctx context.Context, b *Build) (*agent.Client, []sandbox.Layer, error) {
			h.lock = b.Lock
			b.Host(h)
			b.Undo(func() { undone = true })
			return nil, nil, errors.New("the environment did not start")
		},
	})
	if err == nil || h.tornDown() != 1 || !undone {
		t.Fatalf("create: %v; teardowns %d, undone %v", err, h.tornDown(), undone)
	}
	if hostlock.Held(hostlock.SandboxDir(r.StateDir), "sb-rollback") {
		t.Error("the sandbox's lock is still held")
	}
	// The capability check refuses before anything is made.
	_, err = r.Create(context.Background(), sandbox.Spec{Mounts: []sandbox.Mount{{Source: "/x", Target: "/y", Cow: true}}}, Steps{
		Start: func(context.Context, *Build) (*agent.Client, []sandbox.Layer, error) {
			t.Fatal("started a sandbox the driver cannot run")
			return nil, nil, nil
		},
	})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a cow mount on a driver without: %v, want ErrUnsupported", err)
	}
}

func TestReattach(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		r := newRecipe(t)
		a := newFakeAgent()
		a.persistent = true
		h := newFakeHost(nil)
		created := time.Now().Add(-time.Hour)
		inst, err := r.Reattach(context.Background(), "sb-again", Reattaching{
			Spec: sandbox.Spec{ID: "sb-again", Limits: sandbox.Limits{Lifetime: 2 * time.Hour}}, Created: created, Host: h,
			Lock: func(l *hostlock.Lock) { h.lock = l },
			Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
				h.conn = a.serve(t)
				return agent.Dial(ctx, h.conn)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		in := inst.(*Instance)
		defer in.Close(context.Background())
		if !strings.HasPrefix(in.execPrefix, "r") || in.execPrefix == "e" {
			t.Errorf("exec prefix %q: a reattached sandbox needs its own", in.execPrefix)
		}
		if in.lifetime == nil {
			t.Error("no lifetime")
		}
		if !hostlock.Held(hostlock.SandboxDir(r.StateDir), "sb-again") {
			t.Error("the earlier process's lock was not taken")
		}
		if v, ok := in.AgentProtocol(); !ok || v != agent.Version {
			t.Errorf("protocol %d %v", v, ok)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		r := newRecipe(t)
		a := newFakeAgent()
		a.version = agent.Version + 1
		h := newFakeHost(nil)
		inst, err := r.Reattach(context.Background(), "sb-old", Reattaching{
			Spec: sandbox.Spec{ID: "sb-old"}, Host: h,
			Lock: func(l *hostlock.Lock) { h.lock = l },
			Handshake: func(ctx context.Context) (*agent.Client, []sandbox.Layer, error) {
				h.conn = a.serve(t)
				return agent.Dial(ctx, h.conn)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		m, ok := inst.(*Mismatched)
		if !ok {
			t.Fatalf("got %T, want a Mismatched sandbox", inst)
		}
		if v, ok := m.AgentProtocol(); ok || v != agent.Version+1 {
			t.Errorf("protocol %d %v", v, ok)
		}
		if h.tornDown() != 0 {
			t.Error("a mismatched sandbox was ended; it must run on")
		}
		if _, err := m.Start(context.Background(), sandbox.ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, sandbox.ErrMismatch) {
			t.Errorf("start on a mismatched sandbox: %v", err)
		}
		if err := m.Close(context.Background()); err != nil || h.tornDown() != 1 {
			t.Errorf("close: %v, teardowns %d", err, h.tornDown())
		}
	})
	t.Run("holder gone", func(t *testing.T) {
		r := newRecipe(t)
		h := newFakeHost(nil)
		_, err := r.Reattach(context.Background(), "sb-gone", Reattaching{
			Spec: sandbox.Spec{ID: "sb-gone"}, Host: h, HolderLocks: true,
			Lock: func(l *hostlock.Lock) { h.lock = l },
			Handshake: func(context.Context) (*agent.Client, []sandbox.Layer, error) {
				t.Fatal("dialled a sandbox whose holder is gone")
				return nil, nil, nil
			},
		})
		if !errors.Is(err, sandbox.ErrNotFound) || h.tornDown() != 1 {
			t.Errorf("reattach: %v, teardowns %d; want ErrNotFound and what is left removed", err, h.tornDown())
		}
	})
	t.Run("no answer", func(t *testing.T) {
		r := newRecipe(t)
		h := newFakeHost(nil)
		_, err := r.Reattach(context.Background(), "sb-mute", Reattaching{
			Spec: sandbox.Spec{ID: "sb-mute"}, Host: h,
			Lock: func(l *hostlock.Lock) { h.lock = l },
			Handshake: func(context.Context) (*agent.Client, []sandbox.Layer, error) {
				return nil, nil, errors.New("connection refused")
			},
		})
		if err == nil || h.tornDown() != 1 || hostlock.Held(hostlock.SandboxDir(r.StateDir), "sb-mute") {
			t.Errorf("reattach: %v, teardowns %d: a failed reattach must leave nothing", err, h.tornDown())
		}
	})
	t.Run("not persistent", func(t *testing.T) {
		r := newRecipe(t)
		r.Persistent = false
		_, _, err := DecodeState(r, "sb-x", nil, func(s *sandbox.Spec) *sandbox.Spec { return s })
		if !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("reattach on a driver that is not persistent: %v, want ErrUnsupported", err)
		}
	})
}

func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	live, err := hostlock.Sandbox(dir, "sb-live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	var removed []string
	err = hostlock.SweepStale(dir, []string{"sb-live", "sb-dead", "../x"}, func(id string) error {
		removed = append(removed, id)
		return nil
	})
	if err != nil || len(removed) != 1 || removed[0] != "sb-dead" {
		t.Errorf("swept %v (%v), want only sb-dead", removed, err)
	}
}

// Two state directories never share a cgroup parent: a sweep takes a group
// whose lock its own state directory does not hold for a stale sandbox's.
func TestDefaultCgroupParent(t *testing.T) {
	for _, dir := range []string{DefaultStateDir, "/run/airlock/", "/run//airlock"} {
		if got := DefaultCgroupParent(dir); got != "airlock" {
			t.Errorf("DefaultCgroupParent(%q) = %q, want airlock", dir, got)
		}
	}
	a, b := DefaultCgroupParent("/tmp/state-a"), DefaultCgroupParent("/tmp/state-b")
	if a == "airlock" || b == "airlock" || a == b || !strings.HasPrefix(a, "airlock-") {
		t.Errorf("parents of two other state directories: %q and %q; want two distinct airlock-HASH", a, b)
	}
	if a != DefaultCgroupParent("/tmp/state-a/") {
		t.Errorf("the same directory written two ways has two parents")
	}
	s, err := Shared{StateDir: "/tmp/state-a"}.WithDefaults(false)
	if err != nil || s.CgroupParent != a {
		t.Errorf("WithDefaults with a state directory of its own: parent %q, %v; want %q", s.CgroupParent, err, a)
	}
	s, err = Shared{StateDir: "/tmp/state-a", CgroupParent: "mine"}.WithDefaults(false)
	if err != nil || s.CgroupParent != "mine" {
		t.Errorf("a given parent was replaced: %q, %v", s.CgroupParent, err)
	}
}
