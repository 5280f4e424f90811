package sandboxtest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStream: two Runs sharing a Stream of 3 run up to three cases at a
// time between them; while an alone case's check runs no case of either
// is at any step; each Run runs every case; and a group's
// first cases start before the group before it has ended (no barrier
// between groups). With -run naming one case, that case runs and the
// stream does not wait for the ones left out (TestStream's child).
func TestStream(t *testing.T) {
	child := os.Getenv("SANDBOXTEST_STREAM_CHILD") != ""
	var gs []group
	for g := range 3 {
		var cases []testCase
		for i := range 4 {
			cases = append(cases, testCase{name: "c" + strconv.Itoa(i), alone: g == 2 && i == 1})
		}
		gs = append(gs, group{name: "g" + strconv.Itoa(g), cases: cases})
	}
	var (
		mu          sync.Mutex
		now, most   int
		started     = map[string][]string{} // by run, in order of start
		ended       = map[string]time.Time{}
		begun       = map[string]time.Time{}
		aloneBeside []string
	)
	step := func(name string, alone bool, d time.Duration) {
		mu.Lock()
		now++
		most = max(most, now)
		if alone && now > 1 {
			aloneBeside = append(aloneBeside, name)
		}
		mu.Unlock()
		time.Sleep(d)
		mu.Lock()
		if alone && now > 1 {
			aloneBeside = append(aloneBeside, name)
		}
		now--
		mu.Unlock()
	}
	s := NewStream(3)
	var wg sync.WaitGroup
	for _, run := range []string{"r0", "r1"} {
		wg.Go(func() {
			t.Run(run, func(t *testing.T) {
				r := s.join()
				for _, g := range gs {
					s.group(t, r, g, func(t *testing.T, c testCase, q *quiet) {
						name := run + "/" + g.name + "/" + c.name
						mu.Lock()
						started[run] = append(started[run], g.name+"/"+c.name)
						begun[name] = time.Now()
						mu.Unlock()
						step(name, false, 5*time.Millisecond) // create
						t.Cleanup(func() {
							step(name, false, 5*time.Millisecond) // close
							mu.Lock()
							ended[name] = time.Now()
							mu.Unlock()
						})
						d := 10 * time.Millisecond
						if c.name == "c3" {
							d = 100 * time.Millisecond // a group's long last case
						}
						if c.alone {
							done := q.alone()
							step(name, true, d)
							done()
						} else {
							step(name, false, d)
						}
					})
				}
				r.wg.Wait()
			})
		})
	}
	wg.Wait()
	if child {
		// Run by the parent with -run naming one case.
		for run, names := range started {
			t.Logf("ran %s/%s", run, strings.Join(names, " "))
		}
		return
	}
	var want []string
	for _, g := range gs {
		for _, c := range g.cases {
			want = append(want, g.name+"/"+c.name)
		}
	}
	for _, run := range []string{"r0", "r1"} {
		// In order, but for cases that waited together behind an alone
		// case (a read-write lock lets its readers go in any order).
		if got := slices.Sorted(slices.Values(started[run])); !slices.Equal(got, want) {
			t.Errorf("%s ran the cases %v; want %v", run, got, want)
		}
		if b, e := begun[run+"/g1/c0"], ended[run+"/g0/c3"]; !b.Before(e) {
			t.Errorf("%s: g1's first case started %v after g0's last ended: the stream waited between groups", run, b.Sub(e))
		}
	}
	if most != 3 {
		t.Errorf("at most %d steps ran at a time; want 3", most)
	}
	if len(aloneBeside) > 0 {
		t.Errorf("alone cases checked with other cases beside them: %v", aloneBeside)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestStream$/^r1$/^g1$/^c2$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDBOXTEST_STREAM_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ran r1/g1/c2\n") || strings.Contains(string(out), "ran r0") {
		t.Errorf("with -run naming one case: %v\n%s", err, out)
	}
}
