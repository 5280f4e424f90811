package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
)

// jsonCodec encodes plain Go structs as JSON. Connect's own JSON codec needs
// protobuf messages; airlock's messages are structs in this package.
type jsonCodec struct{}

func (jsonCodec) Name() string                  { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error {
	return json.Unmarshal(b, v)
}

// Messages cross a local socket: compressing them costs more time and
// memory than it saves, so gzip, which Connect offers by default, is off.
func HandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCompression("gzip", nil, nil),
		connect.WithCodec(jsonCodec{}),
		connect.WithReadMaxBytes(MaxMessage),
		connect.WithSendMaxBytes(MaxMessage),
	}
}

func clientOptions() []connect.ClientOption {
	return []connect.ClientOption{
		connect.WithAcceptCompression("gzip", nil, nil),
		connect.WithCodec(jsonCodec{}),
		connect.WithReadMaxBytes(MaxMessage),
		connect.WithSendMaxBytes(MaxMessage),
	}
}

// ServeConn serves h over HTTP/2 without TLS on the one connection c until
// the connection ends.
func ServeConn(ctx context.Context, c net.Conn, h http.Handler) {
	srv := &http2.Server{
		MaxConcurrentStreams: MaxStreams,
		IdleTimeout:          0,
		// A stream whose reader stops (stdin of a command that does not
		// read it; an egress download the command never reads) holds at
		// most its own window. The connection's window is larger than all
		// streams' windows together, so data streams can never starve
		// the control calls (exec, signal, files, close) of the
		// connection's window.
		MaxUploadBufferPerStream:     streamWindow,
		MaxUploadBufferPerConnection: MaxStreams * streamWindow * 2,
	}
	srv.ServeConn(c, &http2.ServeConnOpts{
		Context:    ctx,
		Handler:    h,
		BaseConfig: &http.Server{ReadHeaderTimeout: 10 * time.Second},
	})
}

// dialConn makes an HTTP client whose every request travels over the one
// connection c as an HTTP/2 stream.
func dialConn(c net.Conn) (*http.Client, *http2.ClientConn, error) {
	tr := &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		// The agent is untrusted: cap what one response may declare.
		MaxHeaderListSize: 64 << 10,
	}
	cc, err := tr.NewClientConn(c)
	if err != nil {
		return nil, nil, err
	}
	return &http.Client{Transport: cc}, cc, nil
}

// MaxStreams caps the streams open at once on one agent connection.
const MaxStreams = 1000

// streamWindow is how much the host may send on one stream before the
// agent reads it.
const streamWindow = 512 << 10

// CallTimeout bounds a host→agent call that moves no data (signal, stat,
// mkdir…), and each step of one that does (a file transfer makes progress
// at least this often, or fails): an agent that does not answer is an
// error, never a hang.
const CallTimeout = 30 * time.Second

// baseURL is the URL prefix of every call; the host part is never resolved.
const baseURL = "http://agent"

// Errorf returns a Connect error with code, for the host to classify.
func Errorf(code connect.Code, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(code, err)
}
