//go:build linux

package native

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestCreateAtDensity is a measurement, not a check (opt-in:
// AIRLOCK_DENSITY_N=N, AIRLOCK_DENSITY_K=creates timed at each count): it
// times creates (each closed again) with 10 live sandboxes of a
// persistent driver and with N live, counts this process's descriptors
// per sandbox, and times execs at both (docs/decisions.md, 62). It stops
// growing when MemAvailable falls below 6 GiB.
func TestCreateAtDensity(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AIRLOCK_DENSITY_N"))
	if n == 0 {
		t.Skip("AIRLOCK_DENSITY_N not set")
	}
	requireNative(t)
	ctx := context.Background()
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Limits: sandbox.Limits{Lifetime: time.Hour}}
	var live []sandbox.Instance
	defer func() {
		for _, sb := range live {
			_ = sb.Close(ctx)
		}
	}()
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	memAvail := func() int64 {
		b, _ := os.ReadFile("/proc/meminfo")
		var v int64
		for l := range strings.Lines(string(b)) {
			if _, err := fmt.Sscanf(l, "MemAvailable: %d kB", &v); err == nil {
				return v << 10
			}
		}
		return 0
	}
	grow := func(to int) {
		for len(live) < to {
			if len(live)%50 == 0 && memAvail() < 6<<30 {
				t.Logf("stop at %d: MemAvailable %d MiB", len(live), memAvail()>>20)
				return
			}
			sb, err := d.Create(ctx, spec)
			if err != nil {
				t.Fatalf("create %d: %v", len(live), err)
			}
			live = append(live, sb)
		}
	}
	cycle := func(k int) []time.Duration {
		var ds []time.Duration
		for range k {
			t0 := time.Now()
			sb, err := d.Create(ctx, spec)
			ds = append(ds, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			_ = sb.Close(ctx)
		}
		return ds
	}
	execs := func(k int) []time.Duration {
		var ds []time.Duration
		for i := range k {
			t0 := time.Now()
			res, err := sandbox.Run(ctx, live[i%len(live)], sandbox.ExecRequest{Argv: []string{"/bin/true"}})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %v %+v", err, res)
			}
			ds = append(ds, time.Since(t0))
		}
		return ds
	}
	k := 60
	if v, _ := strconv.Atoi(os.Getenv("AIRLOCK_DENSITY_K")); v > 0 {
		k = v
	}
	grow(10)
	f10 := fds()
	c10 := cycle(k)
	e10 := execs(200)
	t0 := time.Now()
	grow(n)
	growT := time.Since(t0)
	fN := fds()
	time.Sleep(2 * time.Second)
	cN := cycle(k)
	eN := execs(200)
	per := float64(fN-f10) / float64(len(live)-10)
	t.Logf("RESULT live=%d create@10 p50=%.2fms p99=%.2fms | create@%d p50=%.2fms p99=%.2fms | grow %d in %v (%.2f ms each) | fds/sandbox=%.2f (fds %d at 10, %d at %d) | exec@10 p50=%.2fms exec@%d p50=%.2fms p99=%.2fms",
		len(live), ms(pct(c10, 50)), ms(pct(c10, 99)), len(live), ms(pct(cN, 50)), ms(pct(cN, 99)),
		len(live)-10, growT.Round(time.Millisecond), float64(growT.Milliseconds())/float64(len(live)-10),
		per, f10, fN, len(live), ms(pct(e10, 50)), len(live), ms(pct(eN, 50)), ms(pct(eN, 99)))
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
