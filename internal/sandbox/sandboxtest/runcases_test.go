package sandboxtest

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestRunCases: with Parallel 3, the cases not marked alone run up to
// three at a time, and each alone case runs with no other case beside it;
// with Parallel 0 every case runs by itself, in order.
func TestRunCases(t *testing.T) {
	var cases []testCase
	for i := range 9 {
		cases = append(cases, testCase{name: "c" + strconv.Itoa(i), alone: i%4 == 1})
	}
	for _, tt := range []struct {
		parallel, wantMost int
	}{{0, 1}, {1, 1}, {3, 3}} {
		t.Run("parallel_"+strconv.Itoa(tt.parallel), func(t *testing.T) {
			var (
				mu            sync.Mutex
				now, most     int
				order         []string
				aloneBeside   []string
				ran           = map[string]bool{}
				wantAloneLast = tt.parallel > 1
			)
			runCases(t, cases, tt.parallel, func(t *testing.T, c testCase) {
				mu.Lock()
				now++
				most = max(most, now)
				if c.alone && now > 1 {
					aloneBeside = append(aloneBeside, c.name)
				}
				order = append(order, c.name)
				ran[c.name] = true
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				if c.alone && now > 1 {
					aloneBeside = append(aloneBeside, c.name)
				}
				now--
				mu.Unlock()
			})
			if len(ran) != len(cases) {
				t.Errorf("%d of %d cases ran: %v", len(ran), len(cases), order)
			}
			if most != tt.wantMost {
				t.Errorf("at most %d cases ran at a time; want %d", most, tt.wantMost)
			}
			if len(aloneBeside) > 0 {
				t.Errorf("alone cases ran beside others: %v", aloneBeside)
			}
			if wantAloneLast {
				for i, name := range order {
					if alone := name == "c1" || name == "c5"; alone != (i >= len(order)-2) {
						t.Errorf("with Parallel, the alone cases run after the others: order %v", order)
						break
					}
				}
			} else {
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
