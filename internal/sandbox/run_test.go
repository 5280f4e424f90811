package sandbox

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestWallTimeout(t *testing.T) {
	l := Limits{Timeout: 7 * time.Second}
	pty := &TermSize{Rows: 24, Cols: 80}
	for _, tt := range []struct {
		name string
		req  ExecRequest
		l    Limits
		want time.Duration
	}{
		{"asked", ExecRequest{Timeout: time.Second}, l, time.Second},
		{"asked, background", ExecRequest{Timeout: time.Second, Background: true}, l, time.Second},
		{"asked, terminal", ExecRequest{Timeout: time.Second, PTY: pty}, l, time.Second},
		{"the sandbox's", ExecRequest{}, l, 7 * time.Second},
		{"the default", ExecRequest{}, Limits{}, DefaultTimeout},
		{"background: none", ExecRequest{Background: true}, l, 0},
		{"terminal: none", ExecRequest{PTY: pty}, l, 0},
	} {
		if got := tt.req.WallTimeout(tt.l); got != tt.want {
			t.Errorf("%s: WallTimeout = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// stubProcess is a Process that ends when end is called, or, when
// confirm is set, when it is sent SIGKILL.
type stubProcess struct {
	confirm bool
	mu      sync.Mutex
	signals []syscall.Signal
	done    chan struct{}
	once    sync.Once
	res     Result
}

func (p *stubProcess) ID() string { return "x1" }

func (p *stubProcess) Wait(ctx context.Context) (Result, error) {
	select {
	case <-p.done:
		return p.res, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (p *stubProcess) Signal(_ context.Context, sig syscall.Signal) error {
	p.mu.Lock()
	p.signals = append(p.signals, sig)
	p.mu.Unlock()
	if p.confirm && sig == syscall.SIGKILL {
		p.end(Result{ExitCode: -1, Signal: "SIGKILL", Reason: ReasonKilled, LimitsHit: []Limit{}})
	}
	return nil
}

func (p *stubProcess) end(r Result) { p.once.Do(func() { p.res = r; close(p.done) }) }

func (p *stubProcess) killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.signals) == 1 && p.signals[0] == syscall.SIGKILL
}

func TestWaitOrKill(t *testing.T) {
	t.Run("ends", func(t *testing.T) {
		p := &stubProcess{done: make(chan struct{})}
		p.end(Result{ExitCode: 3, Reason: ReasonExit})
		res, err := WaitOrKill(t.Context(), p)
		if err != nil || res.ExitCode != 3 || len(p.signals) != 0 {
			t.Errorf("a process that ended: %+v, %v, signals %v", res, err, p.signals)
		}
	})
	t.Run("killed and confirmed", func(t *testing.T) {
		p := &stubProcess{confirm: true, done: make(chan struct{})}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		res, err := WaitOrKill(ctx, p)
		if err != nil || res.Reason != ReasonKilled || res.Message != "" || !p.killed() {
			t.Errorf("a process killed on cancel that confirms: %+v, %v, signals %v", res, err, p.signals)
		}
	})
	t.Run("killed, not confirmed", func(t *testing.T) {
		p := &stubProcess{done: make(chan struct{})}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		res, err := WaitOrKill(ctx, p)
		took := time.Since(start)
		if !errors.Is(err, context.Canceled) || res.Reason != ReasonKilled || res.Signal != "SIGKILL" || res.ExitCode != -1 || res.LimitsHit == nil {
			t.Errorf("a process killed on cancel that never confirms: %+v, %v", res, err)
		}
		if took > KillWait+time.Second {
			t.Errorf("WaitOrKill took %v, want about KillWait (%v) after the cancel", took, KillWait)
		}
		// The kill is sent from a goroutine of its own.
		deadline := time.Now().Add(time.Second)
		for !p.killed() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if !p.killed() {
			t.Errorf("signals sent %v, want one SIGKILL", p.signals)
		}
	})
}
