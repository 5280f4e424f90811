package egress

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// writeLog is a connection that records each Write it gets.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *writeLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

// TestRecordBatcher: what is written inside a batch leaves in one write
// when it ends, in order with what came before; outside a batch every
// write goes straight through; a batch never holds more than maxBatch.
func TestRecordBatcher(t *testing.T) {
	c := &writeLog{}
	b := &recordBatcher{Conn: c}
	b.Write([]byte("a"))
	b.begin()
	b.Write([]byte("b"))
	b.Write([]byte("c"))
	if len(c.writes) != 1 {
		t.Fatalf("a batch wrote before its end: %q", c.writes)
	}
	if err := b.end(); err != nil {
		t.Fatal(err)
	}
	b.Write([]byte("d"))
	if got := c.writes; len(got) != 3 || string(got[0]) != "a" || string(got[1]) != "bc" || string(got[2]) != "d" {
		t.Fatalf("writes %q, want a, bc, d", got)
	}
	c.writes = nil
	b.begin()
	big := bytes.Repeat([]byte("x"), maxBatch/2+1)
	b.Write(big)
	b.Write(big)
	b.Write(bytes.Repeat([]byte("y"), maxBatch))
	b.end()
	if len(c.writes) != 3 {
		t.Fatalf("%d writes, want 3 (each write past maxBatch flushes first)", len(c.writes))
	}
	for _, w := range c.writes {
		if len(w) > maxBatch {
			t.Fatalf("a write of %d bytes, more than maxBatch", len(w))
		}
	}
}

// blockingBody is a body whose Close waits for a Read in progress, as an
// HTTP/1.1 response body's does.
type blockingBody struct {
	mu      sync.Mutex
	release chan struct{}
}

func (b *blockingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	<-b.release
	return 0, io.EOF
}

func (b *blockingBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return nil
}

// TestReadAhead: every byte in order whatever the read sizes, the body's
// error after its last byte, and a Close that does not wait for a read
// the body holds.
func TestReadAhead(t *testing.T) {
	src := bytes.Repeat([]byte("0123456789"), 100_000)
	boom := errors.New("boom")
	for _, size := range []int{1, 7, 4096, readAheadChunk, 1 << 20} {
		r := io.NopCloser(io.MultiReader(iotest.HalfReader(bytes.NewReader(src)), iotest.ErrReader(boom)))
		ra := newReadAhead(r)
		var got []byte
		buf := make([]byte, size)
		var err error
		for {
			var n int
			n, err = ra.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		ra.Close()
		if !bytes.Equal(got, src) || !errors.Is(err, boom) {
			t.Fatalf("read size %d: %d bytes (equal %v), error %v", size, len(got), bytes.Equal(got, src), err)
		}
	}

	b := &blockingBody{release: make(chan struct{})}
	ra := newReadAhead(b)
	time.Sleep(10 * time.Millisecond) // the pump is in Read
	closed := make(chan struct{})
	go func() { ra.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the body's read")
	}
	close(b.release)
}
