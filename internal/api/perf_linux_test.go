package api

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The benchmarks measure the daemon over its API, through the SDK, on a
// real server on 127.0.0.1:
//
//	go test -run '^$' -bench . -benchtime 200x ./internal/api/
//
// Each reports p50 and p99 in milliseconds besides Go's mean.

func reportLatencies(b *testing.B, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

func benchEnv(b *testing.B, o envOptions) (*testEnv, *client.Client) {
	e := nativeEnv(b, o)
	return e, e.agent()
}

// BenchmarkCreateCold: POST /v1/sandboxes without a pool (the delete that
// follows each create is not timed).
func BenchmarkCreateCold(b *testing.B) {
	_, c := benchEnv(b, envOptions{})
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
		b.StopTimer()
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportLatencies(b, ds)
}

// BenchmarkClaim: POST /v1/sandboxes served by a warm pool. Before each
// claim the pool is refilled (untimed), so the claim is measured alone.
func BenchmarkClaim(b *testing.B) {
	e, c := benchEnv(b, envOptions{cfg: supervisor.Config{Templates: []supervisor.Template{{Name: "default", Pool: 4}}}})
	ctx := context.Background()
	ds := make([]time.Duration, 0, b.N)
	full := func() {
		for {
			p := e.sup.Pools()[0]
			if p.Ready == p.Size && p.Filling == 0 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		full()
		b.StartTimer()
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if !sb.FromPool {
			b.Fatal("not a claim")
		}
		ds = append(ds, d)
		b.StopTimer()
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	reportLatencies(b, ds)
}

// BenchmarkExecTrue: POST /v1/sandboxes/{id}/exec of /bin/true, waiting for
// the result, one at a time.
func BenchmarkExecTrue(b *testing.B) {
	_, c := benchEnv(b, envOptions{})
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 10; i++ { // warm up
		_, _ = c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"/bin/true"}})
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"/bin/true"}})
		ds = append(ds, time.Since(start))
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("exec /bin/true: %+v, %v", r, err)
		}
	}
	b.StopTimer()
	reportLatencies(b, ds)
}

// BenchmarkExecThroughput: execs of /bin/true per second with 2 and 16
// clients, each on a sandbox of its own, for b.N execs in all.
func BenchmarkExecThroughput(b *testing.B) {
	for _, clients := range []int{2, 16} {
		b.Run(map[int]string{2: "clients=2", 16: "clients=16"}[clients], func(b *testing.B) {
			_, c := benchEnv(b, envOptions{})
			ctx := context.Background()
			ids := make([]string, clients)
			for i := range ids {
				sb, err := c.CreateSandbox(ctx, client.CreateRequest{Limits: client.Limits{MemoryBytes: 64 << 20}})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = sb.ID
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			b.ResetTimer()
			start := time.Now()
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := c.Exec(ctx, id, client.ExecRequest{Argv: []string{"/bin/true"}}); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			if err, ok := failed.Load().(error); ok {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "execs/s")
		})
	}
}
