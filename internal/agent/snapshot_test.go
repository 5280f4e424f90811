package agent

import (
	"bytes"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestBlobCodecRoundTrip(t *testing.T) {
	var c BlobCodec
	chunk := &BlobChunk{Index: 3, Digest: "sha256:ab", Data: []byte("\x00content\xff"), End: true, Size: 9, MTime: 42}
	b, err := c.Marshal(chunk)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\x00content\xff")) {
		t.Error("the data is not carried as it is")
	}
	var got BlobChunk
	if err := c.Unmarshal(b, &got); err != nil || got.Index != 3 || !bytes.Equal(got.Data, chunk.Data) || !got.End || got.MTime != 42 {
		t.Fatalf("chunk round trip: %+v, %v", got, err)
	}
	in := &ApplyInput{Blob: &BlobChunk{Digest: "sha256:cd", Data: []byte("x")}}
	b, _ = c.Marshal(in)
	var gin ApplyInput
	if err := c.Unmarshal(b, &gin); err != nil || gin.Blob == nil || string(gin.Blob.Data) != "x" {
		t.Fatalf("apply input round trip: %+v, %v", gin, err)
	}
	// Everything else is JSON.
	entries := &ApplyInput{Roots: []string{sandbox.Workspace}, Entries: []sandbox.TreeEntry{{Path: "/workspace", Type: sandbox.EntryDir, Mode: 0o755}}, EntriesEnd: true}
	b, _ = c.Marshal(entries)
	var ge ApplyInput
	if err := c.Unmarshal(b, &ge); err != nil || len(ge.Entries) != 1 || !ge.EntriesEnd {
		t.Fatalf("entries round trip: %+v, %v", ge, err)
	}
	// A chunk is not an apply input, nor the other way round.
	b, _ = c.Marshal(chunk)
	if err := c.Unmarshal(b, &gin); err == nil {
		t.Error("a chunk decoded as an apply input")
	}
}

func FuzzBlobCodec(f *testing.F) {
	var c BlobCodec
	for _, v := range []any{&BlobChunk{Data: []byte("abc"), End: true}, &ApplyInput{Blob: &BlobChunk{Digest: "d"}}, &ApplyEvent{Need: []string{"x"}}} {
		b, _ := c.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{1, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var bc BlobChunk
		_ = c.Unmarshal(b, &bc)
		var ai ApplyInput
		_ = c.Unmarshal(b, &ai)
		var ev ApplyEvent
		_ = c.Unmarshal(b, &ev)
	})
}
