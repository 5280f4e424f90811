package agentd

import (
	"bytes"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The Go runtime never ends a thread it made: every burst of blocking
// system calls (building the sandbox, a few execs at once) leaves idle
// threads behind for the agent's life. Each is a task of the host's
// kernel.pid_max, which thousands of sandboxes run out of. Once the agent
// has been quiet for trimAfter, it ends the idle ones: a goroutine that
// exits locked to its thread takes the thread with it (docs/decisions.md).

// trimAfter is how long the agent waits after its last request before it
// trims its threads.
const trimAfter = time.Second

// minThreads is the fewest threads the runtime keeps: the main one (which
// the main goroutine keeps), sysmon, the template thread that starts
// threads for locked ones, and one that runs goroutines.
const minThreads = 4

// trimmer trims the agent's threads once no request came for trimAfter.
type trimmer struct {
	mu    sync.Mutex
	timer *time.Timer
}

// poke says the agent is busy: the trim waits for another trimAfter.
func (t *trimmer) poke() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer == nil {
		t.timer = time.AfterFunc(trimAfter, trimIdle)
		return
	}
	t.timer.Reset(trimAfter)
}

// wrap pokes the trimmer at the start and the end of every request.
func (t *trimmer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.poke()
		defer t.poke()
		h.ServeHTTP(w, r)
	})
}

// trimIdle trims the threads, then gives back to the OS what the heap
// holds beyond its live objects when that is worth a collection: more
// than garbageWorthGC of garbage, or any once the agent has been
// collected. The first collection costs an agent about 0.4 MiB that is
// never given back (its sweep gives every size class of the heap a
// second set of span lists; docs/decisions.md, 77).
func trimIdle() {
	trimmed := trimThreads()
	metrics.Read(heapSamples)
	cycles, objects, live := heapSamples[0].Value, heapSamples[1].Value, heapSamples[2].Value
	if cycles.Kind() != metrics.KindUint64 || objects.Kind() != metrics.KindUint64 || live.Kind() != metrics.KindUint64 {
		return
	}
	garbage := int64(objects.Uint64()) - int64(live.Uint64())
	if garbage > garbageWorthGC || (trimmed && cycles.Uint64() > 0) {
		debug.FreeOSMemory()
	}
}

// garbageWorthGC is how much garbage makes a first collection worth its
// cost. A fresh agent holds about 0.5 MiB of objects, most of them the
// building's garbage, and each exec adds 0.15–0.2 MiB; the first
// collection frees them but costs 0.4–0.6 MiB of span sets. At 512 KiB a
// fresh agent was collected or not by a few KiB, and one exec always
// brought a collection that left it 0.3–0.5 MiB larger than none did
// (docs/decisions.md, 93).
const garbageWorthGC = 1 << 20

// heapSamples are the runtime's collections so far, the bytes of heap
// objects (live or not yet collected) and of live ones at the last
// collection.
var heapSamples = []metrics.Sample{
	{Name: "/gc/cycles/total:gc-cycles"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/gc/heap/live:bytes"},
}

// trimThreads ends idle threads one at a time while that lowers the count:
// when no idle thread is left to take over, the runtime starts a new one
// and the count stays, and trimming stops.
func trimThreads() (trimmed bool) {
	for range 64 {
		n := threadCount()
		if n <= minThreads {
			return trimmed
		}
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
			// Returning locked ends this goroutine's thread.
		}()
		<-done
		if !threadsBelow(n) {
			return trimmed
		}
		trimmed = true
	}
	return trimmed
}

// threadsBelow waits a little for the thread count to fall below n.
func threadsBelow(n int) bool {
	for range 50 {
		if c := threadCount(); c > 0 && c < n {
			return true
		}
		time.Sleep(200 * time.Microsecond)
	}
	return false
}

// threadCount is how many threads the agent has (0 when /proc cannot
// tell). It makes next to no garbage (the path's copy, 16 bytes): the
// trim polls it hundreds of times while the agent is idle, and garbage
// made then brings on a collection, which costs an idle agent more than
// the garbage did (docs/decisions.md, 77). os.ReadFile made about 3 KiB
// a call.
func threadCount() int {
	fd, err := unix.Open("/proc/self/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 || n == len(buf) {
		return 0
	}
	return statThreads(buf[:n])
}

// statThreads reads num_threads from /proc/PID/stat content b (0 when it
// is not there). The fields after the command name, which may hold
// anything, begin with the state; num_threads is the 18th of them.
func statThreads(b []byte) int {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	field := 0
	inField := false
	n := 0
	for _, c := range b[i+1:] {
		if c == ' ' || c == '\n' {
			if inField && field == 18 {
				return n
			}
			inField = false
			continue
		}
		if !inField {
			inField = true
			field++
		}
		if field == 18 {
			if c < '0' || c > '9' {
				return 0
			}
			n = n*10 + int(c-'0')
		}
	}
	if inField && field == 18 {
		return n
	}
	return 0
}
