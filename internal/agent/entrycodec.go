package agent

import (
	"encoding/binary"
	"errors"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A Scan's entries cross the connection in a compact binary form (tag
// tagScan of BlobCodec): a diff of a 10,000-file workspace spent most of
// its host time decoding them as JSON. Strings are a uvarint length and
// their bytes, numbers varints:
//
//	count, then per entry: path, type, mode, size, digest, target, mtime
//	count, then the unsettled paths
//
// The decoder trusts nothing: every length is checked against what is
// left, and the entries are validated by the caller as before.

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// marshalScan encodes c after the tag byte.
func marshalScan(c *ScanChunk) []byte {
	n := 1 + 2*binary.MaxVarintLen64
	for i := range c.Entries {
		e := &c.Entries[i]
		n += len(e.Path) + len(e.Type) + len(e.Digest) + len(e.Target) + 7*binary.MaxVarintLen64
	}
	for _, u := range c.Unsettled {
		n += len(u) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, tagScan)
	b = binary.AppendUvarint(b, uint64(len(c.Entries)))
	for i := range c.Entries {
		e := &c.Entries[i]
		b = appendString(b, e.Path)
		b = appendString(b, e.Type)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendVarint(b, e.Size)
		b = appendString(b, e.Digest)
		b = appendString(b, e.Target)
		b = binary.AppendVarint(b, e.MTime)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Unsettled)))
	for _, u := range c.Unsettled {
		b = appendString(b, u)
	}
	return b
}

var errScanCodec = errors.New("scan codec: a malformed message")

// scanReader reads the fields of an encoded ScanChunk.
type scanReader struct {
	b   []byte
	err error
}

func (r *scanReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errScanCodec
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *scanReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = errScanCodec
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *scanReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errScanCodec
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// count reads a number of items, each at least min bytes long.
func (r *scanReader) count(min int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.err = errScanCodec
		return 0
	}
	return int(n)
}

// unmarshalScan decodes b (after the tag byte) into c.
func unmarshalScan(b []byte, c *ScanChunk) error {
	r := &scanReader{b: b}
	*c = ScanChunk{}
	// An entry is at least 7 bytes: four empty strings and three numbers.
	if n := r.count(7); n > 0 {
		c.Entries = make([]sandbox.TreeEntry, n)
		for i := range c.Entries {
			e := &c.Entries[i]
			e.Path = r.string()
			e.Type = r.string()
			mode := r.uvarint()
			if mode > 0xffffffff {
				r.err = errScanCodec
			}
			e.Mode = uint32(mode)
			e.Size = r.varint()
			e.Digest = r.string()
			e.Target = r.string()
			e.MTime = r.varint()
			if r.err != nil {
				return r.err
			}
		}
	}
	if n := r.count(1); n > 0 {
		c.Unsettled = make([]string, n)
		for i := range c.Unsettled {
			c.Unsettled[i] = r.string()
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errScanCodec
	}
	return r.err
}
