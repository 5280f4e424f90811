package agentd

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

func TestChunkWriter(t *testing.T) {
	data := make([]byte, 5*agent.ChunkSize+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	tests := []struct {
		name   string
		writes []int // sizes of successive writes
	}{
		{"nothing", nil},
		{"empty write", []int{0}},
		{"one byte", []int{1}},
		{"exactly one chunk", []int{agent.ChunkSize}},
		{"one chunk in pieces", []int{agent.ChunkSize - 1, 1}},
		{"one byte past a chunk", []int{agent.ChunkSize + 1}},
		{"many small", []int{100, 200, 300, 0, 400, agent.ChunkSize, 5}},
		{"one big write", []int{5*agent.ChunkSize + 123}},
		{"mixed", []int{1, 3 * agent.ChunkSize, agent.ChunkSize - 1, agent.ChunkSize + 123}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var chunks [][]byte
			w := &chunkWriter{send: func(b []byte) error {
				// The writer reuses its buffer: keep a copy.
				chunks = append(chunks, append([]byte(nil), b...))
				return nil
			}}
			var want []byte
			off := 0
			for _, n := range tt.writes {
				got, err := w.Write(data[off : off+n])
				if err != nil || got != n {
					t.Fatalf("Write(%d bytes) = %d, %v", n, got, err)
				}
				want = append(want, data[off:off+n]...)
				off += n
			}
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
			var all []byte
			for i, c := range chunks {
				if len(c) == 0 {
					t.Errorf("chunk %d is empty", i)
				}
				if len(c) > agent.ChunkSize {
					t.Errorf("chunk %d has %d bytes, more than %d", i, len(c), agent.ChunkSize)
				}
				if i < len(chunks)-1 && len(c) != agent.ChunkSize {
					t.Errorf("chunk %d of %d has %d bytes: only the last may be short", i, len(chunks), len(c))
				}
				all = append(all, c...)
			}
			if !bytes.Equal(all, want) {
				t.Errorf("sent %d bytes, want %d (same content: %v)", len(all), len(want), bytes.Equal(all, want))
			}
			if wantChunks := (len(want) + agent.ChunkSize - 1) / agent.ChunkSize; len(chunks) != wantChunks {
				t.Errorf("%d chunks, want %d", len(chunks), wantChunks)
			}
			// A second flush sends nothing.
			n := len(chunks)
			if err := w.flush(); err != nil || len(chunks) != n {
				t.Errorf("second flush sent %d chunks, %v", len(chunks)-n, err)
			}
		})
	}
	t.Run("send error", func(t *testing.T) {
		boom := errors.New("stream closed")
		w := &chunkWriter{send: func([]byte) error { return boom }}
		if n, err := w.Write(make([]byte, 10)); err != nil || n != 10 {
			t.Errorf("buffered Write = %d, %v", n, err)
		}
		if n, err := w.Write(make([]byte, agent.ChunkSize)); !errors.Is(err, boom) || n != 0 {
			t.Errorf("Write that sends = %d, %v, want 0, %v", n, err, boom)
		}
		w2 := &chunkWriter{send: func([]byte) error { return boom }}
		w2.Write([]byte("x"))
		if err := w2.flush(); !errors.Is(err, boom) {
			t.Errorf("flush = %v", err)
		}
	})
	t.Run("io.Copy", func(t *testing.T) {
		var got bytes.Buffer
		w := &chunkWriter{send: func(b []byte) error {
			if len(b) > agent.ChunkSize {
				t.Errorf("chunk of %d bytes", len(b))
			}
			got.Write(b)
			return nil
		}}
		if _, err := io.Copy(w, iotest.OneByteReader(bytes.NewReader(data[:3*agent.ChunkSize+1]))); err != nil {
			t.Fatal(err)
		}
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), data[:3*agent.ChunkSize+1]) {
			t.Error("io.Copy through the writer changed the data")
		}
	})
}

func TestChunkReader(t *testing.T) {
	// next yields the chunks in order, then err.
	source := func(err error, chunks ...[]byte) func() ([]byte, error) {
		return func() ([]byte, error) {
			if len(chunks) == 0 {
				return nil, err
			}
			c := chunks[0]
			chunks = chunks[1:]
			return c, nil
		}
	}
	tests := []struct {
		name    string
		pending []byte
		chunks  [][]byte
		want    string
	}{
		{"nothing", nil, nil, ""},
		{"first chunk only", []byte("hello"), nil, "hello"},
		{"first and more", []byte("he"), [][]byte{[]byte("ll"), []byte("o")}, "hello"},
		{"empty chunks are skipped", nil, [][]byte{{}, []byte("a"), nil, {}, []byte("b")}, "ab"},
		{"big chunks", bytes.Repeat([]byte("x"), agent.ChunkSize), [][]byte{bytes.Repeat([]byte("y"), agent.ChunkSize)}, string(bytes.Repeat([]byte("x"), agent.ChunkSize)) + string(bytes.Repeat([]byte("y"), agent.ChunkSize))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &chunkReader{pending: tt.pending, next: source(io.EOF, tt.chunks...)}
			got, err := io.ReadAll(r)
			if err != nil || string(got) != tt.want {
				t.Errorf("ReadAll = %q, %v, want %q", got, err, tt.want)
			}
			// Reading in tiny pieces gives the same.
			r = &chunkReader{pending: tt.pending, next: source(io.EOF, tt.chunks...)}
			got, err = io.ReadAll(iotest.OneByteReader(r))
			if err != nil || string(got) != tt.want {
				t.Errorf("one byte at a time = %q, %v, want %q", got, err, tt.want)
			}
		})
	}
	t.Run("error after data", func(t *testing.T) {
		boom := errors.New("client went away")
		r := &chunkReader{pending: []byte("ab"), next: source(boom, []byte("cd"))}
		buf := make([]byte, 10)
		var got []byte
		var err error
		for {
			var n int
			n, err = r.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		if string(got) != "abcd" || !errors.Is(err, boom) {
			t.Errorf("read %q then %v, want abcd then %v", got, err, boom)
		}
	})
	t.Run("small buffer keeps the rest", func(t *testing.T) {
		r := &chunkReader{pending: []byte("abcdef"), next: source(io.EOF)}
		buf := make([]byte, 4)
		n, err := r.Read(buf)
		if n != 4 || err != nil || string(buf[:n]) != "abcd" {
			t.Fatalf("Read = %d %q %v", n, buf[:n], err)
		}
		n, err = r.Read(buf)
		if n != 2 || err != nil || string(buf[:n]) != "ef" {
			t.Fatalf("Read = %d %q %v", n, buf[:n], err)
		}
		if n, err = r.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("Read at the end = %d %v", n, err)
		}
	})
}
