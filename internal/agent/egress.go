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
// The stream is Connect's streaming protocol with a raw codec
// (application/connect+raw), spoken directly over the agent's HTTP/2
// connection by both sides (egresswire.go): every message is a 5-byte
// prefix (flags, big-endian length) and the tunnelled bytes as they are;
// the first message each way is empty (the host's "ready", the agent's
// "accepted"). The host ends its direction by ending the request body; the
// agent ends its own with one more empty message, and the call with
// Connect's end-of-stream message. Neither side goes through connect-go
// here: each message it copies twice more, and the prefix it writes apart
// from the bytes costs the host an HTTP/2 frame and a system call of its
// own per message (docs/decisions.md).

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
	// CA, when set, is the certificate (PEM) of the host's egress CA,
	// which intercepts the HTTPS of hosts with secrets or method and path
	// rules. The agent writes the sandbox's own system bundle and CA to
	// CABundle, a path inside the sandbox, where the variables the host
	// sets point (SSL_CERT_FILE and others).
	CA       string `json:"ca,omitempty"`
	CABundle string `json:"ca_bundle,omitempty"`
}

// egressIdle is how many streams the host keeps waiting in the agent.
const egressIdle = 4

// ServeEgress keeps idle Egress streams open in the agent and calls serve,
// in a goroutine of its own, with each connection a command makes to the
// sandbox's proxy port. It returns when ctx ends or the agent connection
// fails.
func (c *Client) ServeEgress(ctx context.Context, serve func(net.Conn)) error {
	if c.tun != nil {
		// Connections to the proxy port come handed over; the streams
		// below still carry the forwarded addresses'.
		defer c.tun.setServe(serve)()
	}
	taken := make(chan error, egressIdle)
	wait := func() {
		sc, err := c.openEgress(ctx)
		taken <- err
		if err == nil {
			serve(sc)
		}
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

// openEgress opens an Egress stream and waits until the agent has a
// command's connection for it.
func (c *Client) openEgress(ctx context.Context) (*streamConn, error) {
	return c.openStream(ctx, ProcEgress, nil)
}

// openStream opens a stream of procedure proc (Egress or Dial) in the
// egress wire, with the request headers hdr, and waits for the agent's
// "accepted".
func (c *Client) openStream(ctx context.Context, proc string, hdr http.Header) (*streamConn, error) {
	rctx, cancel := context.WithCancel(ctx)
	body := newEgressBody()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, baseURL+proc, body)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", egressContentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := c.cc.RoundTrip(req)
	if err != nil {
		cancel()
		return nil, err
	}
	// Closing the response aborts the stream, the request body's blocked
	// reads and writes included; the context alone does not.
	sc := &streamConn{body: body, resp: resp, cancel: func() { cancel(); resp.Body.Close() }}
	fail := func(err error) (*streamConn, error) {
		cancel()
		resp.Body.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != egressContentType {
		return fail(fmt.Errorf("agent: the egress stream was answered with %s, %q", resp.Status, resp.Header.Get("Content-Type")))
	}
	// The agent's "accepted": an empty message.
	n, end, err := ReadEgressPrefix(resp.Body)
	switch {
	case err != nil:
		return fail(err)
	case end:
		return fail(readEgressEnd(resp.Body, n))
	case n != 0:
		return fail(errors.New("agent: the egress stream did not start with an empty message"))
	}
	return sc, nil
}

// streamConn is a host-side Egress stream as a net.Conn. A read deadline
// that passes tears the stream down (the connection is then unusable);
// write deadlines are not supported.
type streamConn struct {
	body   *egressBody
	resp   *http.Response
	cancel func() // tears the stream down
	left   uint32 // bytes left of the message being read
	eof    bool   // the agent sent the empty message that ends its half
	err    error  // the stream ended with this error
	dmu    sync.Mutex
	rdl    time.Time // read deadline; zero: none
	rmu    sync.Mutex
	once   sync.Once
}

func (c *streamConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	c.dmu.Lock()
	dl := c.rdl
	c.dmu.Unlock()
	var timer *time.Timer
	var expired atomic.Bool
	if !dl.IsZero() {
		timer = time.AfterFunc(time.Until(dl), func() { expired.Store(true); c.cancel() })
	}
	n, err := c.read(p)
	if timer != nil {
		timer.Stop()
	}
	if expired.Load() && err != nil {
		c.err = os.ErrDeadlineExceeded
		return n, os.ErrDeadlineExceeded
	}
	return n, err
}

// read reads the bytes of the next message (or of the one being read) into
// p, straight from the HTTP/2 stream.
func (c *streamConn) read(p []byte) (int, error) {
	for c.left == 0 {
		switch {
		case c.err != nil:
			return 0, c.err
		case c.eof:
			return 0, io.EOF
		}
		n, end, err := ReadEgressPrefix(c.resp.Body)
		switch {
		case err != nil:
			c.err = hostError(err)
		case end:
			if c.err = readEgressEnd(c.resp.Body, n); c.err == nil {
				c.err = io.EOF
			}
		case n == 0:
			c.eof = true
		default:
			c.left = n
		}
	}
	n, err := c.resp.Body.Read(p[:min(uint32(len(p)), c.left)])
	c.left -= uint32(n)
	if err != nil {
		if errors.Is(err, io.EOF) && c.left > 0 {
			err = io.ErrUnexpectedEOF
		}
		if c.left > 0 || !errors.Is(err, io.EOF) {
			c.err = err
		}
		if n > 0 {
			err = nil
		}
	}
	return n, err
}

func (c *streamConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), EgressChunkSize)
		if err := c.body.write(p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseWrite ends the host's half: the agent shuts down the write side of
// the command's connection.
func (c *streamConn) CloseWrite() error {
	c.body.closeWrite()
	return nil
}

// Close ends the host's half, which flushes what was written, and lets the
// agent finish its half (the command reads the last bytes and closes)
// before the stream is torn down, at most egressLinger later.
func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.body.closeWrite()
		go func() {
			t := time.AfterFunc(egressLinger, c.cancel)
			defer t.Stop()
			c.rmu.Lock()
			defer c.rmu.Unlock()
			_, _ = io.Copy(io.Discard, c.resp.Body)
			c.cancel()
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

// EgressChunkSize is the most one message carries: large enough that a
// download costs few messages, far below MaxMessage.
const EgressChunkSize = 256 << 10
