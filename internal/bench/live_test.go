package bench

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// fakeSandbox's commands end with res and err, or never when block is set.
// Methods it does not override panic.
type fakeSandbox struct {
	sandbox.Instance
	res   sandbox.Result
	err   error
	block chan struct{}
	calls int
}

func (f *fakeSandbox) ID() string { return "sb-fake" }

func (f *fakeSandbox) Start(context.Context, sandbox.ExecRequest) (sandbox.Process, error) {
	f.calls++
	return fakeProcess{f}, nil
}

type fakeProcess struct{ f *fakeSandbox }

func (p fakeProcess) ID() string                                   { return "e1" }
func (p fakeProcess) Signal(context.Context, syscall.Signal) error { return nil }
func (p fakeProcess) Wait(ctx context.Context) (sandbox.Result, error) {
	if p.f.block != nil {
		select {
		case <-p.f.block:
		case <-ctx.Done():
			return sandbox.Result{}, ctx.Err()
		}
	}
	return p.f.res, p.f.err
}

func TestGuardedExec(t *testing.T) {
	ctx := context.Background()
	ok := &guarded{sb: &fakeSandbox{res: sandbox.Result{Reason: sandbox.ReasonExit}}}
	if _, err := ok.exec(ctx); err != nil {
		t.Errorf("exec of a sandbox that exits 0 = %v", err)
	}

	exit1 := &guarded{sb: &fakeSandbox{res: sandbox.Result{Reason: sandbox.ReasonExit, ExitCode: 1}}}
	if _, err := exit1.exec(ctx); err == nil || !strings.Contains(err.Error(), "exit 1") {
		t.Errorf("exec that exits 1 = %v, want an error", err)
	}
	failing := &guarded{sb: &fakeSandbox{err: sandbox.ErrClosed}}
	if _, err := failing.exec(ctx); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("exec that fails = %v, want ErrClosed", err)
	}

	block := make(chan struct{})
	defer close(block)
	fake := &fakeSandbox{block: block}
	hanging := &guarded{sb: fake, hang: 50 * time.Millisecond}
	t0 := time.Now()
	_, err := hanging.exec(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not return within") || time.Since(t0) > 2*time.Second {
		t.Fatalf("exec that hangs = %v after %v, want a hang error after about 50 ms", err, time.Since(t0))
	}
	if !hanging.hung.Load() {
		t.Error("a sandbox that hung is not marked hung")
	}
	if _, err := hanging.exec(ctx); !errors.Is(err, errHung) || fake.calls != 1 {
		t.Errorf("exec after a hang = %v with %d calls, want errHung without calling the sandbox again", err, fake.calls)
	}
}

// TestMeasureStepStopsOnLowMemory: the density test's execs stop, saying
// where and why, once the host's free memory is near its reserve, instead
// of running the host out of memory (each exec leaves a cgroup the kernel
// frees late: decision 81).
func TestMeasureStepStopsOnLowMemory(t *testing.T) {
	var live []*guarded
	for range 50 {
		live = append(live, &guarded{sb: &fakeSandbox{res: sandbox.Result{Reason: sandbox.ReasonExit}}})
	}
	calls := 0
	low := func() string {
		calls++
		if calls > 5 { // 3 in the untimed round (0, 20, 40), then 0 and 20 of the timed ones
			return "MemAvailable 100 MiB is near the 512 MiB kept free"
		}
		return ""
	}
	step, _, err := measureStep(context.Background(), Options{TrueRuns: 200}, nil, live, low)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(step.ExecStopped, "timed execs at 40 of 200") || !strings.Contains(step.ExecStopped, "MemAvailable") {
		t.Errorf("ExecStopped = %q, want the timed execs stopped at 40 of 200 with the reason", step.ExecStopped)
	}
	if step.Exec.N != 40 {
		t.Errorf("%d timed execs, want the 40 before the stop", step.Exec.N)
	}
	calls = 100
	step, _, _ = measureStep(context.Background(), Options{TrueRuns: 200}, nil, live, low)
	if !strings.Contains(step.ExecStopped, "untimed first execs at 0 of 50") || step.Exec.N != 0 {
		t.Errorf("with no room from the start: ExecStopped %q, %d timed", step.ExecStopped, step.Exec.N)
	}
}
