package agentd

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestStatThreads reads num_threads from /proc/PID/stat lines, whatever
// the command name holds.
func TestStatThreads(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 %s 0 18 19\n"
	for _, tt := range []struct {
		name, line string
		want       int
	}{
		{"plain", "42 (airlock-agent)" + strings.Replace(tail, "%s", "7", 1), 7},
		{"spaces and parens in the name", "42 (a) b ) c)" + strings.Replace(tail, "%s", "123", 1), 123},
		{"last field", "42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 9", 9},
		{"too short", "42 (x) S 1 2 3", 0},
		{"no name", "42 x S 1 2", 0},
		{"not a number", "42 (x)" + strings.Replace(tail, "%s", "many", 1), 0},
	} {
		if got := statThreads([]byte(tt.line)); got != tt.want {
			t.Errorf("%s: statThreads(%q) = %d, want %d", tt.name, tt.line, got, tt.want)
		}
	}
}

// TestThreadCountMakesNoGarbage: the trim polls the count while the agent
// is idle, where garbage brings on a collection (docs/decisions.md, 77).
func TestThreadCountMakesNoGarbage(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	want := -1
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			want, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if got := threadCount(); got < 1 || (want > 0 && got > 4*want) {
		t.Fatalf("threadCount = %d, /proc/self/status says %d", got, want)
	}
	// The process's allocations are counted, so goroutines other tests
	// left behind count too (once 108 bytes a call, in CI): the least of
	// a few rounds is threadCount's own.
	const calls, rounds = 200, 5
	least := uint64(math.MaxUint64)
	for range rounds {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range calls {
			threadCount()
		}
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/calls)
	}
	if least > 64 {
		t.Errorf("threadCount allocates %d bytes a call (the least of %d rounds), want at most 64", least, rounds)
	}
}
