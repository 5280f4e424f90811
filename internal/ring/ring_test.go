package ring

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// stream is the reference: every byte ever written.
func stream(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestReadAt(t *testing.T) {
	all := stream(100)
	tests := []struct {
		name     string
		size     int
		writes   []int // lengths of the writes, in order
		off      int64
		buf      int
		wantFrom int64
		wantN    int
	}{
		{name: "empty", size: 10, off: 0, buf: 5, wantFrom: 0, wantN: 0},
		{name: "all of a short stream", size: 10, writes: []int{3, 4}, off: 0, buf: 20, wantFrom: 0, wantN: 7},
		{name: "from the middle", size: 10, writes: []int{7}, off: 4, buf: 20, wantFrom: 4, wantN: 3},
		{name: "p shorter than what is there", size: 10, writes: []int{7}, off: 1, buf: 2, wantFrom: 1, wantN: 2},
		{name: "at the end", size: 10, writes: []int{7}, off: 7, buf: 5, wantFrom: 7, wantN: 0},
		{name: "past the end waits there", size: 10, writes: []int{7}, off: 9, buf: 5, wantFrom: 9, wantN: 0},
		{name: "exactly full", size: 10, writes: []int{10}, off: 0, buf: 20, wantFrom: 0, wantN: 10},
		{name: "wrapped: missed the oldest", size: 10, writes: []int{6, 6}, off: 0, buf: 20, wantFrom: 2, wantN: 10},
		{name: "wrapped: from inside, across the seam", size: 10, writes: []int{6, 6, 3}, off: 8, buf: 20, wantFrom: 8, wantN: 7},
		{name: "one write longer than the ring", size: 10, writes: []int{3, 25}, off: 0, buf: 20, wantFrom: 18, wantN: 10},
		{name: "a long first write", size: 10, writes: []int{25, 2}, off: 16, buf: 20, wantFrom: 17, wantN: 10},
		{name: "ring of one byte", size: 1, writes: []int{3, 2}, off: 0, buf: 4, wantFrom: 4, wantN: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(tt.size)
			var w int
			for _, n := range tt.writes {
				if k, err := b.Write(all[w : w+n]); k != n || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
				}
				w += n
			}
			p := make([]byte, tt.buf)
			n, from := b.ReadAt(p, tt.off)
			if n != tt.wantN || from != tt.wantFrom {
				t.Fatalf("ReadAt(%d) = %d bytes from %d, want %d from %d", tt.off, n, from, tt.wantN, tt.wantFrom)
			}
			if !bytes.Equal(p[:n], all[from:from+int64(n)]) {
				t.Errorf("ReadAt(%d) read %v, want %v", tt.off, p[:n], all[from:from+int64(n)])
			}
			start, end, _ := b.Bounds()
			if end != int64(w) || start != max(0, int64(w-tt.size)) {
				t.Errorf("Bounds = %d, %d; want %d, %d", start, end, max(0, w-tt.size), w)
			}
			kept, first := b.Bytes()
			if first != start || !bytes.Equal(kept, all[start:end]) {
				t.Errorf("Bytes = %v from %d, want %v from %d", kept, first, all[start:end], start)
			}
		})
	}
}

// TestRandom checks many writes and reads against the reference stream.
func TestRandom(t *testing.T) {
	all := stream(1 << 16)
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 100, 4096, 5000} {
		b := New(size)
		w := 0
		for w < len(all) {
			n := min(r.IntN(size*2+3), len(all)-w)
			if _, err := b.Write(all[w : w+n]); err != nil {
				t.Fatal(err)
			}
			w += n
			off := int64(r.IntN(w + 2))
			p := make([]byte, r.IntN(size+5))
			k, from := b.ReadAt(p, off)
			wantFrom := max(off, int64(w-size), 0)
			wantN := int(max(0, min(int64(len(p)), int64(w)-wantFrom)))
			if from != wantFrom || k != wantN || !bytes.Equal(p[:k], all[from:from+int64(k)]) {
				t.Fatalf("size %d, %d written: ReadAt(%d bytes, %d) = %d from %d, want %d from %d (equal %v)",
					size, w, len(p), off, k, from, wantN, wantFrom, bytes.Equal(p[:k], all[from:from+int64(k)]))
			}
		}
		if len(b.buf) > size {
			t.Errorf("size %d: the buffer holds %d bytes", size, len(b.buf))
		}
	}
}

func TestGrowsWithUse(t *testing.T) {
	b := New(1 << 20)
	_, _ = b.Write([]byte("hello"))
	if c := cap(b.buf); c > 4096 {
		t.Errorf("5 bytes written into a 1 MiB ring take %d bytes", c)
	}
	_, _ = b.Write(make([]byte, 3<<20))
	if c := cap(b.buf); c != 1<<20 {
		t.Errorf("after 3 MiB the ring's capacity is %d, want exactly its size", c)
	}
}

func TestClose(t *testing.T) {
	b := New(8)
	_, _ = b.Write([]byte("abc"))
	changed := b.Changed()
	b.Close()
	select {
	case <-changed:
	default:
		t.Fatal("Close did not signal Changed")
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	p := make([]byte, 8)
	n, from, err := b.Read(context.Background(), p, 0)
	if n != 3 || from != 0 || err != nil {
		t.Errorf("Read of a closed ring's bytes = %d, %d, %v", n, from, err)
	}
	if _, _, err := b.Read(context.Background(), p, 3); !errors.Is(err, io.EOF) {
		t.Errorf("Read at the end of a closed ring: %v, want io.EOF", err)
	}
	b.Close() // twice is harmless
}

func TestReadWaits(t *testing.T) {
	b := New(8)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := b.Read(ctx, make([]byte, 4), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read of an empty ring: %v, want the context's deadline", err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = b.Write([]byte("hi"))
	}()
	p := make([]byte, 4)
	n, from, err := b.Read(context.Background(), p, 0)
	if err != nil || from != 0 || string(p[:n]) != "hi" {
		t.Fatalf("Read = %q from %d, %v", p[:n], from, err)
	}
}

// TestFollowers: one writer that never waits, and readers of every pace;
// each reader sees the stream exactly, except for the gaps it is told of.
func TestFollowers(t *testing.T) {
	all := stream(4 << 20)
	b := New(64 << 10)
	var wg sync.WaitGroup
	type got struct {
		read, missed int64
	}
	results := make([]got, 4)
	for i, pause := range []time.Duration{0, 0, time.Millisecond, 20 * time.Millisecond} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(0)
			p := make([]byte, 4096)
			for {
				n, from, err := b.Read(context.Background(), p, off)
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p[:n], all[from:from+int64(n)]) {
					t.Errorf("reader %d: bytes at %d differ from the stream", i, from)
					return
				}
				results[i].missed += from - off
				results[i].read += int64(n)
				off = from + int64(n)
				time.Sleep(pause)
			}
		}()
	}
	start := time.Now()
	for w := 0; w < len(all); w += 1000 {
		_, _ = b.Write(all[w:min(w+1000, len(all))])
	}
	took := time.Since(start)
	b.Close()
	wg.Wait()
	for i, r := range results {
		if r.read+r.missed != int64(len(all)) {
			t.Errorf("reader %d: read %d and missed %d of %d bytes", i, r.read, r.missed, len(all))
		}
	}
	if results[3].missed == 0 {
		t.Errorf("the slowest reader missed nothing: the writer waited for it (writing took %v)", took)
	}
}

// TestSkip: a buffer that continues another's stream starts at that
// stream's offset; a skip in the middle drops what was held, and readers
// learn what they missed; writes after it wrap as before.
func TestSkip(t *testing.T) {
	all := stream(300)
	tests := []struct {
		name string
		size int
		// ops: a positive number writes that many bytes of the stream, a
		// negative one skips that many.
		ops      []int
		off      int64
		wantFrom int64
		wantN    int
	}{
		{name: "skip on an empty buffer", size: 10, ops: []int{-100}, off: 0, wantFrom: 100, wantN: 0},
		{name: "then writes", size: 10, ops: []int{-100, 4}, off: 0, wantFrom: 100, wantN: 4},
		{name: "then writes that wrap", size: 10, ops: []int{-95, 8, 8}, off: 0, wantFrom: 101, wantN: 10},
		{name: "a skip drops what was held", size: 10, ops: []int{6, -3, 2}, off: 0, wantFrom: 9, wantN: 2},
		{name: "a skip of a full buffer", size: 10, ops: []int{25, -7, 12}, off: 30, wantFrom: 34, wantN: 10},
		{name: "zero skips nothing", size: 10, ops: []int{5, 0}, off: 0, wantFrom: 0, wantN: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(tt.size)
			var ref []byte // what every offset holds; nil where skipped
			var w int
			for _, op := range tt.ops {
				if op < 0 {
					b.Skip(int64(-op))
					ref = append(ref, make([]byte, -op)...)
					continue
				}
				if _, err := b.Write(all[w : w+op]); err != nil {
					t.Fatal(err)
				}
				ref = append(ref, all[w:w+op]...)
				w += op
			}
			p := make([]byte, 64)
			n, from := b.ReadAt(p, tt.off)
			if n != tt.wantN || from != tt.wantFrom {
				t.Fatalf("ReadAt(%d) = %d bytes from %d, want %d from %d", tt.off, n, from, tt.wantN, tt.wantFrom)
			}
			if !bytes.Equal(p[:n], ref[from:from+int64(n)]) {
				t.Errorf("read %q, want %q", p[:n], ref[from:from+int64(n)])
			}
			if start, end, _ := b.Bounds(); end != int64(len(ref)) || start != tt.wantFrom && n > 0 {
				t.Errorf("bounds %d..%d, want ..%d", start, end, len(ref))
			}
		})
	}
}
