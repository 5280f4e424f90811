package sandboxtest

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRunCases: with Parallel 3, the cases run up to three at a time, and
// while an alone case's check runs no other case is at any step; with
// Parallel 0 or 1 every case runs by itself, in order.
func TestRunCases(t *testing.T) {
	var cases []testCase
	for i := range 12 {
		cases = append(cases, testCase{name: "c" + strconv.Itoa(i), alone: i%4 == 1})
	}
	for _, tt := range []struct {
		parallel, wantMost int
	}{{0, 1}, {1, 1}, {3, 3}} {
		t.Run("parallel_"+strconv.Itoa(tt.parallel), func(t *testing.T) {
			var (
				mu          sync.Mutex
				now, most   int
				order       []string
				aloneBeside []string
			)
			// step is one step of a case (making its sandbox, its check,
			// closing it): while it runs, the case counts as busy.
			step := func(name string, alone bool) {
				mu.Lock()
				now++
				most = max(most, now)
				if alone && now > 1 {
					aloneBeside = append(aloneBeside, name)
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				if alone && now > 1 {
					aloneBeside = append(aloneBeside, name)
				}
				now--
				mu.Unlock()
			}
			runCases(t, cases, tt.parallel, func(t *testing.T, c testCase, q *quiet) {
				mu.Lock()
				order = append(order, c.name)
				mu.Unlock()
				step(c.name, false)                       // create
				t.Cleanup(func() { step(c.name, false) }) // close
				if c.alone {
					done := q.alone()
					step(c.name, true)
					done()
				} else {
					step(c.name, false)
				}
			})
			if len(order) != len(cases) {
				t.Errorf("%d of %d cases ran: %v", len(order), len(cases), order)
			}
			if most != tt.wantMost {
				t.Errorf("at most %d steps ran at a time; want %d", most, tt.wantMost)
			}
			if len(aloneBeside) > 0 {
				t.Errorf("alone cases checked with other cases beside them: %v", aloneBeside)
			}
			if tt.parallel <= 1 {
				for i, name := range order {
					if name != cases[i].name {
						t.Errorf("one at a time, the cases run in order: %v", order)
						break
					}
				}
			}
		})
	}
}
