package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"connectrpc.com/connect"
)

// The Egress stream's wire format: Connect's streaming protocol with the
// raw codec, which connect-go speaks too (older hosts and agents used it),
// written and read here without it.

// EgressContentType is the Content-Type of an Egress call, both ways.
const EgressContentType = "application/connect+raw"

const egressContentType = EgressContentType

// EgressPrefixLen is the length of a message's prefix.
const EgressPrefixLen = 5

// egressEndFlag marks the agent's end-of-stream message.
const egressEndFlag = 0x02

// PutEgressPrefix writes the prefix of an n-byte message into b.
func PutEgressPrefix(b []byte, n int) {
	b[0] = 0
	binary.BigEndian.PutUint32(b[1:EgressPrefixLen], uint32(n))
}

// ReadEgressPrefix reads a message's prefix and returns the length of the
// message, and whether it is the end-of-stream message. A compressed or
// oversized message is an error.
func ReadEgressPrefix(r io.Reader) (uint32, bool, error) {
	var b [EgressPrefixLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, false, err
	}
	n := binary.BigEndian.Uint32(b[1:])
	if b[0]&^egressEndFlag != 0 {
		return 0, false, fmt.Errorf("egress stream: a message with flags %#x (only plain messages are sent)", b[0])
	}
	if n > MaxMessage {
		return 0, false, fmt.Errorf("egress stream: a message of %d bytes, more than %d", n, MaxMessage)
	}
	return n, b[0]&egressEndFlag != 0, nil
}

// egressEnd is the JSON of the end-of-stream message.
type egressEnd struct {
	Error *egressEndError `json:"error,omitempty"`
}

type egressEndError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// EgressEnd returns the end-of-stream message that ends an Egress call
// with err (nil: a clean end).
func EgressEnd(code connect.Code, err error) []byte {
	var end egressEnd
	if err != nil {
		end.Error = &egressEndError{Code: code.String(), Message: err.Error()}
	}
	body, _ := json.Marshal(end)
	b := make([]byte, EgressPrefixLen, EgressPrefixLen+len(body))
	PutEgressPrefix(b, len(body))
	b[0] = egressEndFlag
	return append(b, body...)
}

// readEgressEnd reads the rest of an end-of-stream message of n bytes and
// returns the error it carries, nil for a clean end.
func readEgressEnd(r io.Reader, n uint32) error {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	var end egressEnd
	if err := json.Unmarshal(b, &end); err != nil {
		return fmt.Errorf("agent: the egress stream's end does not parse: %w", err)
	}
	if end.Error == nil {
		return nil
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(end.Error.Code)); err != nil {
		code = connect.CodeUnknown
	}
	// The end carries no class header: its code says the class (a Dial
	// to a closed port ends not_found).
	for _, c := range classes {
		if c.code == code && code != connect.CodePermissionDenied {
			return &classedError{msg: truncate512(end.Error.Message), class: c.err}
		}
	}
	return hostError(connect.NewError(code, errors.New(end.Error.Message)))
}

// egressBody is the request body of an Egress call: each write is one
// message, its prefix and bytes handed to the HTTP/2 transport's reads
// together (one DATA frame, one system call), from the writer's own
// buffer. It starts with the empty "ready" message.
type egressBody struct {
	mu     sync.Mutex
	cond   sync.Cond
	head   [EgressPrefixLen]byte
	hoff   int    // head[hoff:] is still to be read
	data   []byte // the writer's bytes still to be read
	closed bool   // the writer's end: EOF once all is read
	err    error  // the transport's end: writes fail with it
}

func newEgressBody() *egressBody {
	b := &egressBody{} // the zero prefix: the empty "ready" message
	b.cond.L = &b.mu
	return b
}

func (b *egressBody) pending() bool { return b.hoff < EgressPrefixLen || len(b.data) > 0 }

// Read is the transport's.
func (b *egressBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.pending() && !b.closed && b.err == nil {
		b.cond.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	if !b.pending() {
		return 0, io.EOF
	}
	n := copy(p, b.head[b.hoff:])
	b.hoff += n
	k := copy(p[n:], b.data)
	b.data = b.data[k:]
	if !b.pending() {
		b.data = nil
		b.cond.Broadcast()
	}
	return n + k, nil
}

// Close is the transport's: it reads no more.
func (b *egressBody) Close() error {
	b.mu.Lock()
	if b.err == nil {
		b.err = io.ErrClosedPipe
	}
	b.mu.Unlock()
	b.cond.Broadcast()
	return nil
}

// write sends p as one message and returns once the transport has taken
// all of it.
func (b *egressBody) write(p []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.pending() && b.err == nil {
		b.cond.Wait()
	}
	switch {
	case b.err != nil:
		return b.err
	case b.closed:
		return io.ErrClosedPipe
	}
	PutEgressPrefix(b.head[:], len(p))
	b.hoff, b.data = 0, p
	b.cond.Broadcast()
	for b.pending() && b.err == nil {
		b.cond.Wait()
	}
	if b.pending() {
		b.data = nil
		return b.err
	}
	return nil
}

// closeWrite ends the body once what was written is read.
func (b *egressBody) closeWrite() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
}
