package agent

import (
	"bytes"
	"reflect"
	"strings"
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
	for _, v := range []any{&BlobChunk{Data: []byte("abc"), End: true}, &ApplyInput{Blob: &BlobChunk{Digest: "d"}}, &ApplyEvent{Need: []string{"x"}}, testScanChunk()} {
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
		var sc ScanChunk
		if c.Unmarshal(b, &sc) == nil {
			// What decodes encodes to what decodes the same.
			again, _ := c.Marshal(&sc)
			var sc2 ScanChunk
			if err := c.Unmarshal(again, &sc2); err != nil || !reflect.DeepEqual(sc, sc2) {
				t.Errorf("scan chunk %q decoded to %+v, which encodes to %q, which decodes to %+v, %v", b, sc, again, sc2, err)
			}
		}
	})
}

func testScanChunk() *ScanChunk {
	return &ScanChunk{
		Entries: []sandbox.TreeEntry{
			{Path: "/workspace", Type: sandbox.EntryDir, Mode: 0o2775, MTime: 1},
			{Path: "/workspace/a b\x00ü", Type: sandbox.EntryFile, Mode: 0o600, Size: 1 << 40, Digest: "sha256:" + strings.Repeat("ab", 32), MTime: -5},
			{Path: "/workspace/l", Type: sandbox.EntrySymlink, Mode: 0o777, Target: "../../etc/passwd", MTime: 1764090000123456789},
			{},
		},
		Unsettled: []string{"/workspace/a b", ""},
	}
}

func TestScanCodec(t *testing.T) {
	var c BlobCodec
	want := testScanChunk()
	b, err := c.Marshal(want)
	if err != nil || b[0] != tagScan {
		t.Fatalf("marshal: %q, %v", b, err)
	}
	var got ScanChunk
	if err := c.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(&got, want) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, want)
	}
	var empty ScanChunk
	if b, _ := c.Marshal(&ScanChunk{}); c.Unmarshal(b, &empty) != nil || empty.Entries != nil || empty.Unsettled != nil {
		t.Fatalf("an empty chunk: %q decodes to %+v", b, empty)
	}
	// Every truncation, and a byte more, fail without a panic.
	for i := 1; i < len(b); i++ {
		if err := c.Unmarshal(b[:i], &got); err == nil {
			t.Errorf("a scan chunk cut at %d of %d bytes decoded", i, len(b))
		}
	}
	if err := c.Unmarshal(append(b[:len(b):len(b)], 0), &got); err == nil {
		t.Error("a scan chunk with a byte after it decoded")
	}
	// Counts and lengths past the message are refused before anything is
	// allocated for them.
	for _, bad := range [][]byte{
		{tagScan, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{tagScan, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{tagScan, 0, 0xff, 0xff, 0xff, 0x7f},
	} {
		if err := c.Unmarshal(bad, &got); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
	// A scan chunk is nothing else, and nothing else a scan chunk.
	var bc BlobChunk
	if err := c.Unmarshal(b, &bc); err == nil {
		t.Error("a scan chunk decoded as a blob chunk")
	}
}
