package egress

import (
	"io"
	"net"
	"net/http"
	"sync"
)

// Batched writes of an intercepted answer (docs/decisions.md, 72).
//
// Go's TLS writes each record (at most 16 KiB) with a system call of its
// own, and reads one record per Read, so a body copied from the upstream
// connection to the sandbox's went as one 16 KiB read, one record and one
// write at a time: on loopback each write is a trip through the network
// stack and a wake-up of the client. The body is now read ahead by a
// goroutine of its own (readAhead), the copy takes everything read so far
// in one Read, and the records that one Write of the handler makes are
// gathered (recordBatcher) and sent in one system call when that Write
// returns. Nothing waits in a buffer past the Write that made it.

// maxBatch bounds what a recordBatcher gathers before it writes.
const maxBatch = 512 << 10

// recordBatcher is the connection under the sandbox's TLS session. Between
// begin and end, what the TLS session writes is gathered; end writes it
// out. Outside, writes go straight through. Writes that come while a batch
// is open (an alert, a key update) join it, so the order holds.
type recordBatcher struct {
	net.Conn
	mu    sync.Mutex
	depth int
	buf   []byte
}

func (b *recordBatcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth > 0 {
		if len(b.buf)+len(p) > maxBatch {
			if err := b.flushLocked(); err != nil {
				return 0, err
			}
		}
		if len(p) < maxBatch {
			b.buf = append(b.buf, p...)
			return len(p), nil
		}
	}
	return b.Conn.Write(p)
}

func (b *recordBatcher) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

func (b *recordBatcher) begin() {
	b.mu.Lock()
	b.depth++
	b.mu.Unlock()
}

// end closes a batch and writes what it gathered.
func (b *recordBatcher) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.depth--
	if b.depth > 0 {
		return nil
	}
	err := b.flushLocked()
	if cap(b.buf) > maxBatch {
		b.buf = nil
	}
	return err
}

// batchedWriter is an HTTP/1.x handler's ResponseWriter whose Write is
// one batch: the records of the body it carries leave in one write. Only
// for HTTP/1.x, whose server writes on the handler's goroutine (HTTP/2's
// writes on a goroutine of its own, which may wait for the client's flow
// control while a batch is open).
type batchedWriter struct {
	http.ResponseWriter
	b *recordBatcher
}

func (w *batchedWriter) Write(p []byte) (int, error) {
	w.b.begin()
	n, err := w.ResponseWriter.Write(p)
	if ferr := w.b.end(); err == nil {
		err = ferr
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer (flush,
// hijack for an upgrade).
func (w *batchedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readAheadMin is the smallest body read ahead: a small answer is read in
// one go anyway, and a goroutine would only add a hop.
const readAheadMin = 64 << 10

// readAheadChunks bounds how many reads a readAhead holds (each at most
// readAheadChunk bytes): the proxy reads at most this far ahead of the
// sandbox.
const (
	readAheadChunks = 16
	readAheadChunk  = 32 << 10
)

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readAheadChunk); return &b }}

// readAhead reads a body in a goroutine of its own and hands its reader
// all it has read so far in one Read.
type readAhead struct {
	r    io.ReadCloser
	ch   chan *[]byte // filled chunks, in order; closed after the last
	err  error        // the body's error, set before ch is closed
	cur  *[]byte      // the chunk being handed out
	off  int
	done chan struct{}
	once sync.Once
}

func newReadAhead(r io.ReadCloser) *readAhead {
	ra := &readAhead{r: r, ch: make(chan *[]byte, readAheadChunks), done: make(chan struct{})}
	go ra.pump()
	return ra
}

func (ra *readAhead) pump() {
	defer close(ra.ch)
	for {
		bp := chunkPool.Get().(*[]byte)
		buf := (*bp)[:readAheadChunk]
		n, err := ra.r.Read(buf)
		if n > 0 {
			*bp = buf[:n]
			select {
			case ra.ch <- bp:
			case <-ra.done:
				return
			}
		} else {
			chunkPool.Put(bp)
		}
		if err != nil {
			ra.err = err
			return
		}
	}
}

func (ra *readAhead) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if ra.cur == nil {
			var bp *[]byte
			var ok bool
			if n == 0 {
				bp, ok = <-ra.ch // wait for the first bytes only
			} else {
				select {
				case bp, ok = <-ra.ch:
				default:
					return n, nil
				}
			}
			if !ok {
				if n > 0 {
					return n, nil
				}
				return 0, ra.err
			}
			ra.cur, ra.off = bp, 0
		}
		k := copy(p[n:], (*ra.cur)[ra.off:])
		n += k
		ra.off += k
		if ra.off == len(*ra.cur) {
			*ra.cur = (*ra.cur)[:cap(*ra.cur)]
			chunkPool.Put(ra.cur)
			ra.cur = nil
		}
	}
	return n, nil
}

// Close ends the pump and closes the body. The close is not waited for:
// an HTTP/1.1 body's Close waits for a Read in progress, and the pump may
// be in one that only the upstream's next bytes or the end of the request
// (its context, cancelled when the handler returns) ends.
func (ra *readAhead) Close() error {
	ra.once.Do(func() {
		close(ra.done)
		go func() { _ = ra.r.Close() }()
	})
	return nil
}
