package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Snapshots: the agent walks the sandbox's writable trees (Scan), sends the
// content of the files the host lacks (ReadBlobs), and makes the trees a
// given state again (Apply). The host hashes every byte it receives itself:
// an agent's digest is never trusted.

// Procedure paths of the snapshot calls.
const (
	ProcScan      = service + "Scan"
	ProcReadBlobs = service + "ReadBlobs"
	ProcApply     = service + "Apply"
)

// ScanRequest asks for the entries of the trees below Roots.
type ScanRequest struct {
	Roots []string `json:"roots"`
	// MaxFiles and MaxBytes bound the entries and the sum of file sizes;
	// zero means no bound.
	MaxFiles int   `json:"max_files,omitempty"`
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// ScanChunk is one message of a Scan's answer: a batch of entries, sorted
// by path across the whole answer.
type ScanChunk struct {
	Entries []sandbox.TreeEntry `json:"entries,omitempty"`
	// Unsettled names files that kept changing while they were hashed.
	Unsettled []string `json:"unsettled,omitempty"`
}

// BlobRef names a file whose content the host wants.
type BlobRef struct {
	Path   string `json:"path"`
	Digest string `json:"digest"`
}

// ReadBlobsRequest asks for the content of files.
type ReadBlobsRequest struct {
	Files []BlobRef `json:"files"`
}

// BlobChunk carries content: in ReadBlobs, of Files[Index]; in Apply, of
// Digest. The last chunk of a file has End set; ReadBlobs's last chunk
// says what the file was when it was read (it may have changed since
// Scan: then Digest, Size and MTime are its new ones).
type BlobChunk struct {
	Index  int    `json:"index,omitempty"`
	Digest string `json:"digest,omitempty"`
	Data   []byte `json:"data,omitempty"`
	End    bool   `json:"end,omitempty"`
	Size   int64  `json:"size,omitempty"`
	MTime  int64  `json:"mtime,omitempty"`
	// Unsettled: the file kept changing while it was read.
	Unsettled bool `json:"unsettled,omitempty"`
	// Restart: the file changed while it was sent; discard what came of
	// it, it is sent again.
	Restart bool `json:"restart,omitempty"`
}

// ApplyInput is a message of the host's half of an Apply: first the
// entries (Roots on the first message, EntriesEnd on the last), then,
// after the agent answered with what it needs, the content of those
// blobs, then BlobsEnd.
type ApplyInput struct {
	Roots      []string            `json:"roots,omitempty"`
	Entries    []sandbox.TreeEntry `json:"entries,omitempty"`
	EntriesEnd bool                `json:"entries_end,omitempty"`
	Blob       *BlobChunk          `json:"blob,omitempty"`
	BlobsEnd   bool                `json:"blobs_end,omitempty"`
}

// ApplyEvent is a message of the agent's half of an Apply: first the
// digests it needs, then, once the trees are changed, the stats.
type ApplyEvent struct {
	Need  []string            `json:"need,omitempty"`
	Ready bool                `json:"ready,omitempty"`
	Done  *sandbox.ApplyStats `json:"done,omitempty"`
}

// entryBatchBytes is about how many bytes of entries one message carries.
const entryBatchBytes = 1 << 20

// EntryBatches splits entries into batches of about entryBatchBytes each.
func EntryBatches(entries []sandbox.TreeEntry) [][]sandbox.TreeEntry {
	var out [][]sandbox.TreeEntry
	start, n := 0, 0
	for i, e := range entries {
		sz := 160 + len(e.Path) + len(e.Target)
		if n+sz > entryBatchBytes && i > start {
			out = append(out, entries[start:i])
			start, n = i, 0
		}
		n += sz
	}
	if start < len(entries) {
		out = append(out, entries[start:])
	}
	return out
}

// Scan returns the entries below req.Roots, sorted by path, and the files
// that kept changing while they were hashed.
func (c *Client) Scan(ctx context.Context, req *ScanRequest) ([]sandbox.TreeEntry, []string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newStallGuard(cancel)
	defer g.stop()
	g.arm()
	st, err := c.scan.get().CallServerStream(ctx, connect.NewRequest(req))
	g.disarm()
	if err != nil {
		return nil, nil, g.err("scan", err)
	}
	defer st.Close()
	var entries []sandbox.TreeEntry
	var unsettled []string
	for {
		g.arm()
		ok := st.Receive()
		g.disarm()
		if !ok {
			break
		}
		m := st.Msg()
		entries = append(entries, m.Entries...)
		unsettled = append(unsettled, m.Unsettled...)
		if req.MaxFiles > 0 && len(entries) > req.MaxFiles+len(req.Roots) {
			return nil, nil, errors.New("scan: the agent sent more entries than allowed")
		}
	}
	if err := g.err("scan", st.Err()); err != nil {
		return nil, nil, err
	}
	return entries, unsettled, nil
}

// ReadBlobs streams the content of files: for each, its chunks to
// write(i, data) (data nil: start over, discarding what came), then
// end(i, last) with the last chunk.
func (c *Client) ReadBlobs(ctx context.Context, files []BlobRef, write func(i int, data []byte) error, end func(i int, last *BlobChunk) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newStallGuard(cancel)
	defer g.stop()
	g.arm()
	st, err := c.readBlobs.get().CallServerStream(ctx, connect.NewRequest(&ReadBlobsRequest{Files: files}))
	g.disarm()
	if err != nil {
		return g.err("read blobs", err)
	}
	defer st.Close()
	next := 0
	for {
		g.arm()
		ok := st.Receive()
		g.disarm()
		if !ok {
			break
		}
		m := st.Msg()
		if m.Index != next {
			return fmt.Errorf("read blobs: the agent sent file %d, expected %d", m.Index, next)
		}
		if m.Restart {
			if err := write(m.Index, nil); err != nil {
				return err
			}
		}
		if len(m.Data) > 0 {
			if err := write(m.Index, m.Data); err != nil {
				return err
			}
		}
		if m.End {
			if err := end(m.Index, m); err != nil {
				return err
			}
			next++
		}
	}
	if err := g.err("read blobs", st.Err()); err != nil {
		return err
	}
	if next != len(files) {
		return fmt.Errorf("read blobs: the agent sent %d of %d files", next, len(files))
	}
	return nil
}

// Apply makes the trees below roots exactly entries. It sends the entries,
// then the content of each digest the agent needs, read with get.
func (c *Client) Apply(ctx context.Context, roots []string, entries []sandbox.TreeEntry, get sandbox.BlobGet) (sandbox.ApplyStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newStallGuard(cancel)
	defer g.stop()
	st := c.apply.get().CallBidiStream(ctx)
	fail := func(err error) (sandbox.ApplyStats, error) {
		if errors.Is(err, io.EOF) {
			// The agent ended the stream: its answer says why.
			if _, rerr := st.Receive(); rerr != nil && !errors.Is(rerr, io.EOF) {
				err = rerr
			}
		}
		_ = st.CloseRequest()
		_ = st.CloseResponse()
		return sandbox.ApplyStats{}, g.err("restore", err)
	}
	batches := EntryBatches(entries)
	if len(batches) == 0 {
		batches = [][]sandbox.TreeEntry{nil}
	}
	for i, b := range batches {
		m := &ApplyInput{Entries: b, EntriesEnd: i == len(batches)-1}
		if i == 0 {
			m.Roots = roots
		}
		g.arm()
		err := st.Send(m)
		g.disarm()
		if err != nil {
			return fail(err)
		}
	}
	g.arm()
	ev, err := st.Receive()
	g.disarm()
	if err != nil {
		return fail(err)
	}
	if !ev.Ready {
		return fail(errors.New("the agent answered out of order"))
	}
	var stats sandbox.ApplyStats
	buf := make([]byte, ChunkSize*8)
	for _, d := range ev.Need {
		if !sandbox.ValidDigest(d) {
			return fail(fmt.Errorf("the agent asked for %q", d))
		}
		r, err := get(ctx, d)
		if err != nil {
			return fail(err)
		}
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 || rerr != nil {
				m := &BlobChunk{Digest: d, Data: buf[:n], End: rerr != nil}
				if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
					r.Close()
					return fail(fmt.Errorf("read stored content %s: %w", d, rerr))
				}
				g.arm()
				err := st.Send(&ApplyInput{Blob: m})
				g.disarm()
				if err != nil {
					r.Close()
					return fail(err)
				}
				stats.Received += int64(n)
			}
			if rerr != nil {
				break
			}
		}
		r.Close()
	}
	g.arm()
	err = st.Send(&ApplyInput{BlobsEnd: true})
	if err == nil {
		err = st.CloseRequest()
	}
	g.disarm()
	if err != nil {
		return fail(err)
	}
	// Changing the trees takes as long as the content is large: the
	// agent's silence is bounded by the stall guard only while it reads.
	ev, err = st.Receive()
	if err != nil {
		return fail(err)
	}
	_ = st.CloseResponse()
	if ev.Done == nil {
		return sandbox.ApplyStats{}, errors.New("restore: the agent answered out of order")
	}
	out := *ev.Done
	out.Received = stats.Received
	return out, nil
}

// BlobCodec carries the snapshot calls' content without JSON: a BlobChunk
// (alone, or as an ApplyInput's Blob) is a tag byte, the length and JSON
// of its other fields, then its data as it is; a ScanChunk is a tag byte
// and its binary form (entrycodec.go). Other messages are a tag byte and
// JSON.
type BlobCodec struct{}

const (
	tagJSON  = 0
	tagChunk = 1
	tagApply = 2
	tagScan  = 3 // a ScanChunk (entrycodec.go)
)

// Name is the codec's name in the content type.
func (BlobCodec) Name() string { return "airlock-blob" }

// Marshal encodes v.
func (BlobCodec) Marshal(v any) ([]byte, error) {
	var c *BlobChunk
	tag := byte(tagJSON)
	switch m := v.(type) {
	case *BlobChunk:
		c, tag = m, tagChunk
	case *ApplyInput:
		if m.Blob != nil && len(m.Roots) == 0 && len(m.Entries) == 0 && !m.EntriesEnd && !m.BlobsEnd {
			c, tag = m.Blob, tagApply
		}
	case *ScanChunk:
		return marshalScan(m), nil
	}
	if c == nil {
		b, err := json.Marshal(v)
		return append([]byte{tagJSON}, b...), err
	}
	meta := *c
	meta.Data = nil
	mb, err := json.Marshal(&meta)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(mb)+len(c.Data))
	out = append(out, tag)
	out = binary.AppendUvarint(out, uint64(len(mb)))
	out = append(out, mb...)
	return append(out, c.Data...), nil
}

// Unmarshal decodes b into v.
func (BlobCodec) Unmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return errors.New("blob codec: empty message")
	}
	tag, b := b[0], b[1:]
	switch tag {
	case tagJSON:
		return json.Unmarshal(b, v)
	case tagScan:
		m, ok := v.(*ScanChunk)
		if !ok {
			return fmt.Errorf("blob codec: cannot unmarshal a scan's entries into %T", v)
		}
		return unmarshalScan(b, m)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return errors.New("blob codec: bad header")
	}
	var c BlobChunk
	if err := json.Unmarshal(b[k:k+int(n)], &c); err != nil {
		return err
	}
	c.Data = append([]byte(nil), b[k+int(n):]...)
	switch m := v.(type) {
	case *BlobChunk:
		if tag != tagChunk {
			return errors.New("blob codec: not a chunk")
		}
		*m = c
	case *ApplyInput:
		if tag != tagApply {
			return errors.New("blob codec: not a restore's content")
		}
		*m = ApplyInput{Blob: &c}
	default:
		return fmt.Errorf("blob codec: cannot unmarshal into %T", v)
	}
	return nil
}

// SnapshotHandlerOptions are the snapshot calls' handler options: the
// usual ones, and the blob codec.
func SnapshotHandlerOptions() []connect.HandlerOption {
	return append(HandlerOptions(), connect.WithCodec(BlobCodec{}))
}

func blobClientOptions() []connect.ClientOption {
	return append(clientOptions(), connect.WithCodec(BlobCodec{}))
}
