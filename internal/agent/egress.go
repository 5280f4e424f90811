package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
)

// Egress tunnels.
//
// In network mode egress the agent listens on EgressListen inside the
// sandbox's network namespace. The host is the HTTP/2 client of the agent
// connection, so it keeps a few idle Egress streams open in advance; each
// stream waits in the agent until a command connects to the port, and then
// carries that one TCP connection both ways. Once a stream is taken the
// host opens another. The host hands each taken stream to the egress proxy
// as a net.Conn that belongs to this sandbox: the proxy knows the sandbox by
// the agent connection the bytes came over, never by anything in them.
//
// Messages are EgressChunks in a raw codec (the bytes as they are, no JSON
// or base64): the first message each way is empty (the host's "ready", the
// agent's "accepted"). The host ends its direction by closing its half of
// the stream; the agent, which cannot close its half without ending the
// call, sends one more empty chunk.

// ProcEgress is the Egress procedure's path.
const ProcEgress = service + "Egress"

// EgressListen is where the agent listens for the sandbox's proxy clients.
const EgressListen = "127.0.0.1:3128"

// EgressEnv is what every command's environment gets in egress mode.
var EgressEnv = []string{
	"HTTP_PROXY=http://" + EgressListen, "HTTPS_PROXY=http://" + EgressListen,
	"http_proxy=http://" + EgressListen, "https_proxy=http://" + EgressListen,
	"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1",
}

// EgressConfig turns the egress listener on.
type EgressConfig struct {
	// Listen is the address to listen on; empty means EgressListen.
	Listen string `json:"listen,omitempty"`
	// Forward are allowed destinations on the host's loopback
	// ("127.0.0.1:11434"): the agent listens on each same address inside
	// the sandbox and carries what connects there to the proxy as a
	// CONNECT to it. Commands reach them directly, as they would on the
	// host, although NO_PROXY sends 127.0.0.1 past the proxy; the
	// sandbox's own loopback stays its own on every other port.
	Forward []string `json:"forward,omitempty"`
}

// EgressChunk is one message of an Egress stream: bytes of the tunnelled
// connection.
type EgressChunk struct {
	Data []byte
}

// RawCodec carries EgressChunks as the bytes they hold.
type RawCodec struct{}

func (RawCodec) Name() string { return "raw" }

func (RawCodec) Marshal(v any) ([]byte, error) {
	c, ok := v.(*EgressChunk)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return c.Data, nil
}

func (RawCodec) Unmarshal(b []byte, v any) error {
	c, ok := v.(*EgressChunk)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	// Callers that receive into the same chunk reuse its buffer: the
	// agent's heap is kept tight, so a download must not allocate per chunk.
	c.Data = append(c.Data[:0], b...)
	return nil
}

func EgressHandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCompression("gzip", nil, nil),
		connect.WithCodec(RawCodec{}),
		connect.WithReadMaxBytes(MaxMessage),
		connect.WithSendMaxBytes(MaxMessage),
	}
}

// egressIdle is how many streams the host keeps waiting in the agent.
const egressIdle = 4

// ServeEgress keeps idle Egress streams open in the agent and calls serve,
// in a goroutine of its own, with each connection a command makes to the
// sandbox's proxy port. It returns when ctx ends or the agent connection
// fails.
func (c *Client) ServeEgress(ctx context.Context, serve func(net.Conn)) error {
	cl := connect.NewClient[EgressChunk, EgressChunk](&http.Client{Transport: c.cc}, baseURL+ProcEgress,
		connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(RawCodec{}),
		connect.WithReadMaxBytes(MaxMessage), connect.WithSendMaxBytes(MaxMessage))
	taken := make(chan error, egressIdle)
	wait := func() {
		st := cl.CallBidiStream(ctx)
		if err := st.Send(&EgressChunk{}); err != nil {
			st.CloseRequest()
			st.CloseResponse()
			taken <- err
			return
		}
		if _, err := st.Receive(); err != nil {
			st.CloseRequest()
			st.CloseResponse()
			taken <- err
			return
		}
		taken <- nil
		sc, err := newStreamConn(st)
		if err != nil {
			st.CloseRequest()
			st.CloseResponse()
			return
		}
		serve(sc)
	}
	for range egressIdle {
		go wait()
	}
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-taken:
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if c.cc.State().Closed {
					return fmt.Errorf("egress tunnel: %w", hostError(err))
				}
				// Back off so that a failing agent cannot make the host spin.
				failures++
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(min(failures, 50)) * 20 * time.Millisecond):
				}
			} else {
				failures = 0
			}
			go wait()
		}
	}
}

// streamConn is a host-side Egress stream as a net.Conn. A read deadline
// that passes tears the stream down (the connection is then unusable);
// write deadlines are not supported.
type streamConn struct {
	st      *connect.BidiStreamForClient[EgressChunk, EgressChunk]
	conn    connect.StreamingClientConn
	pending []byte
	msg     EgressChunk // received into again and again
	eof     bool        // the agent sent the empty chunk that ends its half
	dmu     sync.Mutex
	rdl     time.Time // read deadline; zero: none
	rmu     sync.Mutex
	wmu     sync.Mutex
	once    sync.Once
}

func newStreamConn(st *connect.BidiStreamForClient[EgressChunk, EgressChunk]) (*streamConn, error) {
	conn, err := st.Conn()
	if err != nil {
		return nil, err
	}
	return &streamConn{st: st, conn: conn}, nil
}

func (c *streamConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.pending) == 0 {
		if c.eof {
			return 0, io.EOF
		}
		// Connect does not call Unmarshal for an empty message.
		c.msg.Data = c.msg.Data[:0]
		c.dmu.Lock()
		dl := c.rdl
		c.dmu.Unlock()
		var timer *time.Timer
		var expired atomic.Bool
		if !dl.IsZero() {
			timer = time.AfterFunc(time.Until(dl), func() { expired.Store(true); _ = c.st.CloseResponse() })
		}
		err := c.conn.Receive(&c.msg)
		if timer != nil {
			timer.Stop()
		}
		if expired.Load() {
			return 0, os.ErrDeadlineExceeded
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, hostError(err)
		}
		c.pending, c.eof = c.msg.Data, len(c.msg.Data) == 0
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

func (c *streamConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		k := min(len(p), EgressChunkSize)
		if err := c.st.Send(&EgressChunk{Data: p[:k]}); err != nil {
			return n, hostError(err)
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseWrite ends the host's half: the agent shuts down the write side of
// the command's connection.
func (c *streamConn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.st.CloseRequest()
}

// Close ends the host's half, which flushes what was written, and lets the
// agent finish its half (the command reads the last bytes and closes)
// before the stream is torn down, at most egressLinger later.
func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.wmu.Lock()
		_ = c.st.CloseRequest()
		c.wmu.Unlock()
		go func() {
			t := time.AfterFunc(egressLinger, func() { _ = c.st.CloseResponse() })
			defer t.Stop()
			c.rmu.Lock()
			defer c.rmu.Unlock()
			for {
				if _, err := c.st.Receive(); err != nil {
					break
				}
			}
			_ = c.st.CloseResponse()
		}()
	})
	return nil
}

// egressLinger bounds how long a closed tunnel waits for the command to
// close its end.
const egressLinger = 5 * time.Second

type streamAddr struct{}

func (streamAddr) Network() string { return "airlock-egress" }
func (streamAddr) String() string  { return "sandbox" }

func (c *streamConn) LocalAddr() net.Addr                { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr               { return streamAddr{} }
func (c *streamConn) SetDeadline(t time.Time) error      { return c.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return nil }

// SetReadDeadline bounds the next reads; see streamConn.
func (c *streamConn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	c.rdl = t
	c.dmu.Unlock()
	return nil
}

// EgressChunkSize is the most one EgressChunk carries: large enough that a
// download costs few messages, far below MaxMessage.
const EgressChunkSize = 256 << 10
