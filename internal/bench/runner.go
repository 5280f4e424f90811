package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probe runs one timed operation and returns how long it took.
type probe func(ctx context.Context) (time.Duration, error)

// cmdWorker runs commands one after another, timing each from just before
// fork to just after it was reaped, with the monotonic clock. Stdout goes
// to /dev/null; stderr to an unlinked file (not a pipe, whose copying
// goroutine would add to the time), kept for error messages.
type cmdWorker struct {
	errFile *os.File
	timeout time.Duration
}

func newCmdWorker(timeout time.Duration) (*cmdWorker, error) {
	f, err := os.CreateTemp("", "airlock-bench-stderr-*")
	if err != nil {
		return nil, fmt.Errorf("make a file for stderr: %w", err)
	}
	os.Remove(f.Name()) // keep the descriptor, leave nothing behind
	return &cmdWorker{errFile: f, timeout: timeout}, nil
}

func (w *cmdWorker) close() { w.errFile.Close() }

// run starts argv, waits for it and returns its wall time. The command
// runs in its own process group, which is killed when timeout passes or
// ctx is done.
func (w *cmdWorker) run(ctx context.Context, argv []string) (time.Duration, error) {
	if err := w.errFile.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := w.errFile.Seek(0, 0); err != nil {
		return 0, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = w.errFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", argv[0], err)
	}
	kill := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	timer := time.AfterFunc(w.timeout, kill)
	stop := context.AfterFunc(ctx, kill)
	err := cmd.Wait()
	d := time.Since(t0)
	timedOut := !timer.Stop()
	stop()
	if err != nil {
		if timedOut {
			err = fmt.Errorf("no exit within %v", w.timeout)
		}
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		return d, fmt.Errorf("%s: %w%s", strings.Join(argv, " "), err, w.stderr())
	}
	return d, nil
}

// stderr returns the start of what the last command wrote to stderr, for
// an error message.
func (w *cmdWorker) stderr() string {
	b := make([]byte, 300)
	n, _ := w.errFile.ReadAt(b, 0)
	s := strings.TrimSpace(string(b[:n]))
	if s == "" {
		return ""
	}
	return ": " + strings.ReplaceAll(s, "\n", " / ")
}

// series is the outcome of repeated runs.
type series struct {
	samples  []time.Duration
	fails    int
	firstErr error
}

// maxFailsWithoutSuccess ends a series that is not going to work.
const maxFailsWithoutSuccess = 5

// timeRuns runs p warmup times untimed and then n times timed, stopping
// early when budget is spent (after one timed run at least: a slow row
// whose warm-up took the budget still gets a figure) or when the first
// runs all fail. When every warm-up run fails the series ends without
// measuring.
func timeRuns(ctx context.Context, n, warmup int, budget time.Duration, p probe) (series, error) {
	var s series
	deadline := time.Now().Add(budget)
	warmFails := 0
	for i := 0; i < warmup; i++ {
		if _, err := p(ctx); err != nil {
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			warmFails++
			if s.firstErr == nil {
				s.firstErr = err
			}
		}
	}
	if warmup > 0 && warmFails == warmup {
		s.fails = warmFails
		return s, nil
	}
	s.firstErr = nil
	for i := 0; i < n && (i == 0 || time.Now().Before(deadline)); i++ {
		d, err := p(ctx)
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if err != nil {
			s.fails++
			if s.firstErr == nil {
				s.firstErr = err
			}
			if len(s.samples) == 0 && s.fails >= maxFailsWithoutSuccess {
				break
			}
			continue
		}
		s.samples = append(s.samples, d)
	}
	return s, nil
}

// latencyRow turns s into a row: measured when at least one run succeeded.
func latencyRow(r Row, s series) Row {
	r.Unit = UnitMS
	if len(s.samples) == 0 {
		r.Status = StatusFailed
		if s.firstErr != nil {
			r.Detail = s.firstErr.Error()
		} else {
			r.Detail = "no run within the time budget"
		}
		return r
	}
	r.Status = StatusOK
	st := SummarizeDurations(s.samples)
	r.Stats = &st
	r.Failures = s.fails
	if s.fails > 0 {
		r.Detail = fmt.Sprintf("%d runs failed, first: %v", s.fails, s.firstErr)
	}
	return r
}

// rate is the outcome of a throughput run.
type rate struct {
	perSecond float64
	done      int
	fails     int
	firstErr  error
}

// measureRate runs clients concurrent loops of operations for dur and
// counts the operations completed per second. Each client gets its own
// probe from mk; done, called once per client, releases it.
func measureRate(ctx context.Context, clients int, dur time.Duration, mk func() (probe, func(), error)) (rate, error) {
	probes := make([]probe, clients)
	for i := range probes {
		p, done, err := mk()
		if err != nil {
			return rate{}, err
		}
		defer done()
		probes[i] = p
	}
	var (
		mu sync.Mutex
		r  rate
		wg sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for _, p := range probes {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				_, err := p(ctx)
				mu.Lock()
				if err != nil {
					r.fails++
					if r.firstErr == nil {
						r.firstErr = err
					}
				} else {
					r.done++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	r.perSecond = float64(r.done) / time.Since(start).Seconds()
	return r, nil
}

// rateRow turns r into a throughput row.
func rateRow(row Row, r rate) Row {
	row.Unit = UnitRate
	if r.done == 0 {
		row.Status = StatusFailed
		row.Detail = "no operation completed"
		if r.firstErr != nil {
			row.Detail = r.firstErr.Error()
		}
		return row
	}
	row.Status = StatusOK
	row.Value = ptr(r.perSecond)
	row.Failures = r.fails
	if r.fails > 0 {
		row.Detail = fmt.Sprintf("%d operations failed, first: %v", r.fails, r.firstErr)
	}
	return row
}

// cmdProbe returns a probe factory that runs argv on a worker of its own.
func cmdProbe(argv []string, timeout time.Duration) func() (probe, func(), error) {
	return func() (probe, func(), error) {
		w, err := newCmdWorker(timeout)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) (time.Duration, error) { return w.run(ctx, argv) }, w.close, nil
	}
}
