package supervisor

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// maxStdinQueue is how many bytes written to a background process's
// standard input may wait for it to read them. A write larger than the
// room left waits for the process, bounded by its caller's context and by
// the stall timeout; nothing of it is kept when its caller gives up.
const maxStdinQueue = 1 << 20

// defaultStdinStall is how long a write waits for a process that reads
// nothing of its standard input before it is refused.
const defaultStdinStall = 10 * time.Second

// errStdinClosed: the process's standard input was closed (eof, or the
// process ended).
var errStdinClosed = errors.New("standard input is closed")

// errStdinStalled: the process read nothing for the stall timeout.
var errStdinStalled = errors.New("the process does not read its standard input")

// stdinQueue is the standard input of a background process kept open: an
// io.Reader for the driver, fed by bounded writes that need no goroutine
// of their own.
type stdinQueue struct {
	mu     sync.Mutex
	buf    []byte
	closed bool // no more writes; readers get EOF once buf is drained
	space  chan struct{}
	data   chan struct{}
	writer chan struct{} // one writer at a time, so that writes stay in order
}

// newStdinQueue makes a queue holding initial (which may pass the bound:
// it is the start request's own data).
func newStdinQueue(initial []byte) *stdinQueue {
	return &stdinQueue{
		buf:    append([]byte(nil), initial...),
		space:  make(chan struct{}, 1),
		data:   make(chan struct{}, 1),
		writer: make(chan struct{}, 1),
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Read gives the process what was written, in order; EOF once the queue is
// closed and drained.
func (q *stdinQueue) Read(p []byte) (int, error) {
	for {
		q.mu.Lock()
		if len(q.buf) > 0 {
			n := copy(p, q.buf)
			q.buf = q.buf[n:]
			if len(q.buf) == 0 {
				q.buf = nil
			}
			q.mu.Unlock()
			signal(q.space)
			return n, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return 0, io.EOF
		}
		<-q.data
	}
}

// write queues data, waiting for room while the process reads. It returns
// how much was queued: all of it, or less when ctx ended, the process read
// nothing for stall, or the queue was closed.
func (q *stdinQueue) write(ctx context.Context, data []byte, stall time.Duration) (int, error) {
	select {
	case q.writer <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-q.writer }()
	timer := time.NewTimer(stall)
	defer timer.Stop()
	n := 0
	for n < len(data) {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return n, errStdinClosed
		}
		if room := maxStdinQueue - len(q.buf); room > 0 {
			k := min(room, len(data)-n)
			q.buf = append(q.buf, data[n:n+k]...)
			n += k
			q.mu.Unlock()
			signal(q.data)
			timer.Reset(stall)
			continue
		}
		q.mu.Unlock()
		select {
		case <-q.space:
		case <-ctx.Done():
			return n, ctx.Err()
		case <-timer.C:
			return n, errStdinStalled
		}
	}
	return n, nil
}

// close ends the input: the process reads what is queued, then EOF.
func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.data)
}

// discard ends the input and drops what is queued (the process ended).
func (q *stdinQueue) discard() {
	q.mu.Lock()
	q.closed, q.buf = true, nil
	q.mu.Unlock()
	signal(q.data)
	signal(q.space)
}
