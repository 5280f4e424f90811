package bench

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeProbe fails the calls whose number (from 0) fail says, and takes d.
func fakeProbe(d time.Duration, fail func(i int) bool) (probe, *atomic.Int64) {
	var n atomic.Int64
	return func(ctx context.Context) (time.Duration, error) {
		i := int(n.Add(1) - 1)
		if fail(i) {
			return d, errors.New("boom")
		}
		return d, nil
	}, &n
}

func TestTimeRuns(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		n, warmup int
		fail      func(i int) bool
		wantOK    int
		wantFails int
		wantCalls int64
	}{
		{name: "all succeed", n: 10, warmup: 2, fail: func(int) bool { return false }, wantOK: 10, wantCalls: 12},
		{name: "warm-up failures do not count", n: 5, warmup: 2, fail: func(i int) bool { return i == 0 }, wantOK: 5, wantCalls: 7},
		{name: "every warm-up fails: no measuring", n: 5, warmup: 2, fail: func(int) bool { return true }, wantFails: 2, wantCalls: 2},
		{name: "first runs all fail: stop after five", n: 50, warmup: 1, fail: func(i int) bool { return i > 0 }, wantFails: 5, wantCalls: 6},
		{name: "some fail", n: 10, warmup: 0, fail: func(i int) bool { return i%2 == 0 }, wantOK: 5, wantFails: 5, wantCalls: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, calls := fakeProbe(time.Millisecond, tt.fail)
			s, err := timeRuns(ctx, tt.n, tt.warmup, time.Minute, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.samples) != tt.wantOK || s.fails != tt.wantFails || calls.Load() != tt.wantCalls {
				t.Errorf("got %d samples, %d fails, %d calls; want %d, %d, %d",
					len(s.samples), s.fails, calls.Load(), tt.wantOK, tt.wantFails, tt.wantCalls)
			}
			row := latencyRow(Row{ID: "x"}, s)
			switch {
			case tt.wantOK == 0 && (row.Status != StatusFailed || !strings.Contains(row.Detail, "boom")):
				t.Errorf("row = %s %q, want failed with the first error", row.Status, row.Detail)
			case tt.wantOK > 0 && (row.Status != StatusOK || row.Stats.N != tt.wantOK || row.Failures != tt.wantFails):
				t.Errorf("row = %+v, want ok with %d samples and %d failures", row, tt.wantOK, tt.wantFails)
			}
		})
	}
}

func TestTimeRunsStopsAtBudgetAndContext(t *testing.T) {
	slow := func(ctx context.Context) (time.Duration, error) {
		time.Sleep(20 * time.Millisecond)
		return 20 * time.Millisecond, nil
	}
	s, err := timeRuns(context.Background(), 1000, 0, 100*time.Millisecond, slow)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.samples) < 2 || len(s.samples) > 10 {
		t.Errorf("a 100 ms budget of 20 ms runs took %d samples, want about 5", len(s.samples))
	}

	// A warm-up that takes the whole budget still leaves one timed run.
	s, err = timeRuns(context.Background(), 5, 1, 10*time.Millisecond, slow)
	if err != nil || len(s.samples) != 1 {
		t.Errorf("a warm-up longer than the budget: %d samples (%v), want 1", len(s.samples), err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := timeRuns(ctx, 10, 0, time.Minute, slow); !errors.Is(err, context.Canceled) {
		t.Errorf("timeRuns with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestMeasureRate(t *testing.T) {
	var made, released atomic.Int64
	mk := func() (probe, func(), error) {
		made.Add(1)
		p, _ := fakeProbe(0, func(int) bool { return false })
		return func(ctx context.Context) (time.Duration, error) {
			time.Sleep(10 * time.Millisecond)
			return p(ctx)
		}, func() { released.Add(1) }, nil
	}
	r, err := measureRate(context.Background(), 4, 200*time.Millisecond, mk)
	if err != nil {
		t.Fatal(err)
	}
	if made.Load() != 4 || released.Load() != 4 {
		t.Errorf("made %d probes and released %d, want 4 and 4", made.Load(), released.Load())
	}
	// 4 clients at 10 ms each: about 400 per second.
	if r.perSecond < 200 || r.perSecond > 450 || r.fails != 0 {
		t.Errorf("rate = %+v, want about 400/s and no failures", r)
	}
	row := rateRow(Row{}, r)
	if row.Status != StatusOK || row.Value == nil || *row.Value != r.perSecond || row.Unit != UnitRate {
		t.Errorf("rateRow = %+v", row)
	}
	if row := rateRow(Row{}, rate{fails: 3, firstErr: errors.New("boom")}); row.Status != StatusFailed || row.Detail != "boom" {
		t.Errorf("rateRow of nothing done = %+v, want failed: boom", row)
	}
}

func TestCmdWorker(t *testing.T) {
	w, err := newCmdWorker(300 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx := context.Background()
	if d, err := w.run(ctx, []string{"/bin/true"}); err != nil || d <= 0 {
		t.Errorf("run /bin/true = %v, %v; want a positive time and no error", d, err)
	}
	_, err = w.run(ctx, []string{"/bin/sh", "-c", "echo it broke >&2; exit 3"})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "it broke") {
		t.Errorf("run of a failing command = %v, want its exit status and stderr", err)
	}
	// The stderr of an earlier run does not leak into a later error.
	_, err = w.run(ctx, []string{"/bin/sh", "-c", "exit 4"})
	if err == nil || strings.Contains(err.Error(), "it broke") {
		t.Errorf("second failure = %v, want no stderr of the first", err)
	}
	t0 := time.Now()
	_, err = w.run(ctx, []string{"/bin/sh", "-c", "sleep 30; :"})
	if err == nil || !strings.Contains(err.Error(), "no exit within") || time.Since(t0) > 5*time.Second {
		t.Errorf("run past the timeout = %v after %v, want a timeout error soon", err, time.Since(t0))
	}
}
