// Package ring keeps the recent output of a process: a bounded buffer of
// bytes addressed by offset, which one writer fills without ever waiting
// and any number of readers follow, each at its own pace.
//
// The n-th byte ever written has offset n. The buffer keeps the last Size
// of them; a reader that asks for an offset the buffer no longer holds
// reads from the oldest byte it holds and learns how many it missed. A
// slow reader therefore never slows the writer or the other readers.
//
// The type depends on nothing of airlock, so that it can move to wherever
// a process's output must outlive the process that holds it.
package ring

import (
	"context"
	"errors"
	"io"
	"sync"
)

// ErrClosed is what Write returns once the buffer is closed.
var ErrClosed = errors.New("ring: write to a closed buffer")

// Buffer is a ring of bytes with offsets. Its methods are safe for
// concurrent use.
type Buffer struct {
	mu   sync.Mutex
	buf  []byte // grows up to size as bytes come, then wraps
	size int
	end  int64 // offset of the next byte written
	// base is the offset that position 0 of buf holds (a multiple of
	// size apart from it); first is the oldest offset held (Skip moves
	// both).
	base, first int64
	// closed: no more writes; readers get io.EOF at the end.
	closed  bool
	changed chan struct{} // closed and replaced at every write and at Close
}

// New returns an empty buffer that keeps the last size bytes written to
// it (at least 1). Its memory grows with what is written, up to size.
func New(size int) *Buffer {
	return &Buffer{size: max(size, 1), changed: make(chan struct{})}
}

// Size is how many bytes the buffer keeps.
func (b *Buffer) Size() int { return b.size }

// Write appends p, dropping the oldest bytes past the size. It never waits.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrClosed
	}
	n := len(p)
	if n == 0 {
		return 0, nil
	}
	if len(p) > b.size {
		b.end += int64(len(p) - b.size)
		p = p[len(p)-b.size:]
	}
	if need := int(min(b.end-b.base, int64(b.size))) + len(p); len(b.buf) < b.size && need > len(b.buf) {
		b.grow(min(need, b.size))
	}
	for len(p) > 0 {
		pos := int((b.end - b.base) % int64(b.size))
		k := copy(b.buf[pos:], p)
		b.end += int64(k)
		p = p[k:]
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return n, nil
}

// grow makes buf n bytes long (n <= size), keeping its content; until the
// buffer first fills, byte offsets and positions are the same.
func (b *Buffer) grow(n int) {
	if n <= cap(b.buf) {
		b.buf = b.buf[:n]
		return
	}
	c := min(max(n, 2*cap(b.buf), 4096), b.size)
	nb := make([]byte, n, c)
	copy(nb, b.buf)
	b.buf = nb
}

// Skip drops every byte the buffer holds and moves its end n bytes on:
// the next byte written has offset end+n, and a reader that asks for an
// earlier offset learns that it missed them. A buffer that continues a
// stream another process began (its earlier bytes are elsewhere) starts
// with Skip.
func (b *Buffer) Skip(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || n <= 0 {
		return
	}
	b.end += n
	b.base, b.first = b.end, b.end
	b.buf = b.buf[:0]
	close(b.changed)
	b.changed = make(chan struct{})
}

// Close ends the stream: readers that reach its end get io.EOF.
func (b *Buffer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	close(b.changed)
}

// Bounds returns the offset of the oldest byte kept and the offset of the
// next byte to be written; closed says the stream has ended.
func (b *Buffer) Bounds() (start, end int64, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.start(), b.end, b.closed
}

func (b *Buffer) start() int64 { return max(b.first, b.end-int64(b.size)) }

// Changed returns a channel that is closed at the next Write or at Close.
func (b *Buffer) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// ReadAt copies into p the bytes from offset off on, as many as the
// buffer holds and p fits, and returns how many and the offset of the
// first: later than off when the buffer no longer holds off (from-off
// bytes were missed). It never waits; n is 0 when nothing is there yet.
func (b *Buffer) ReadAt(p []byte, off int64) (n int, from int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.readAt(p, off)
}

func (b *Buffer) readAt(p []byte, off int64) (int, int64) {
	from := max(off, b.start())
	if from >= b.end {
		return 0, from
	}
	want := int(min(int64(len(p)), b.end-from))
	n := 0
	for n < want {
		pos := int((from + int64(n) - b.base) % int64(b.size))
		n += copy(p[n:want], b.buf[pos:])
	}
	return n, from
}

// Read waits until the buffer holds a byte at offset off or later, then
// reads as ReadAt does. At the end of a closed stream it returns io.EOF;
// when ctx ends first, ctx's error.
func (b *Buffer) Read(ctx context.Context, p []byte, off int64) (n int, from int64, err error) {
	for {
		b.mu.Lock()
		n, from = b.readAt(p, off)
		closed, changed := b.closed, b.changed
		b.mu.Unlock()
		if n > 0 || len(p) == 0 {
			return n, from, nil
		}
		if closed {
			return 0, from, io.EOF
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, from, ctx.Err()
		}
	}
}

// Bytes returns a copy of every byte the buffer holds, and the offset of
// the first.
func (b *Buffer) Bytes() ([]byte, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.start()
	p := make([]byte, b.end-start)
	n, _ := b.readAt(p, start)
	return p[:n], start
}
