//go:build linux

package native

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestIdleMemory is a measurement, not a check (opt-in:
// AIRLOCK_IDLEMEM_N=N sandboxes, AIRLOCK_IDLEMEM_EXECS=K execs of
// /bin/true in each, AIRLOCK_IDLEMEM_SETTLE=ms idle before the reading):
// it grows a persistent driver to N idle sandboxes and logs the PSS of
// their processes per sandbox (median, mean, and by kind of mapping) and
// their tasks (docs/decisions.md, 77).
func TestIdleMemory(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AIRLOCK_IDLEMEM_N"))
	if n == 0 {
		t.Skip("AIRLOCK_IDLEMEM_N not set")
	}
	requireNative(t)
	execs, _ := strconv.Atoi(os.Getenv("AIRLOCK_IDLEMEM_EXECS"))
	settle, _ := strconv.Atoi(os.Getenv("AIRLOCK_IDLEMEM_SETTLE"))
	ctx := context.Background()
	d, err := New(Options{Persistent: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := cgroup.Detect()
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
	for range n {
		sb, err := d.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, sb)
	}
	for range execs {
		for _, sb := range live {
			if res, err := sandbox.Run(ctx, sb, sandbox.ExecRequest{Argv: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
				t.Fatalf("exec: %v, %+v", err, res)
			}
		}
	}
	time.Sleep(time.Duration(settle) * time.Millisecond)
	kinds := map[string]int{}
	var per []int
	tasks := 0
	for _, sb := range live {
		pids, err := h.Open("airlock/" + sb.ID()).Procs()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(pids)
		sum := 0
		for _, p := range slices.Compact(pids) {
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p))
			tasks += len(ents)
			sum += pssByKind(t, p, kinds)
		}
		per = append(per, sum)
	}
	total := 0
	for _, v := range per {
		total += v
	}
	slices.Sort(per)
	t.Logf("%d sandboxes, %d execs each, read %d ms later: PSS per sandbox median %d KiB, mean %d KiB (min %d, max %d); tasks %.2f",
		n, execs, settle, per[len(per)/2], total/n, per[0], per[len(per)-1], float64(tasks)/float64(n))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range kinds {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Logf("  %-34s %6d KiB", k, kinds[k]/n)
	}
}

// pssByKind adds the PSS (KiB) of pid's mappings to kinds, by the
// binary's segments and anonymous memory, and returns its sum.
func pssByKind(t *testing.T, pid int, kinds map[string]int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	kind, sum := "", 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":") {
			switch {
			case len(fs) < 6:
				kind = "anonymous " + fs[1]
			case strings.HasPrefix(fs[5], "["):
				kind = fs[5]
			default:
				kind = "file " + fs[1]
			}
			continue
		}
		if len(fs) == 3 && fs[0] == "Pss:" {
			v, _ := strconv.Atoi(fs[1])
			kinds[kind] += v
			sum += v
		}
	}
	return sum
}
