package kubernetes

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// openStream opens a Pod's attach stream (command nil) or an exec
// stream of command in the Pod's container, through the API server, as
// the agent's byte stream: writes go to the process's standard input,
// reads return its standard output, and its standard error goes to log.
// It prefers WebSocket (the API server's current protocol) and falls back
// to SPDY. The stream lives until the connection is closed or the process
// ends; ctx bounds only the opening.
func (k *kclient) openStream(ctx context.Context, ns, pod string, command []string, log io.Writer) (*streamConn, error) {
	req := k.core.Post().Namespace(ns).Resource("pods").Name(pod)
	if command == nil {
		req = req.SubResource("attach").VersionedParams(&corev1.PodAttachOptions{
			Container: containerName, Stdin: true, Stdout: true, Stderr: true,
		}, k.params)
	} else {
		req = req.SubResource("exec").VersionedParams(&corev1.PodExecOptions{
			Container: containerName, Command: command, Stdin: true, Stdout: true, Stderr: true,
		}, k.params)
	}
	u := req.URL()
	ws, err := remotecommand.NewWebSocketExecutor(k.config, "GET", u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(k.config, "POST", u)
	if err != nil {
		return nil, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &streamConn{in: inW, out: outR, inR: inR, cancel: cancel, ended: make(chan struct{})}
	// The executor says nothing until the stream ends: an error in the
	// opening shows as the stream's end, which Read returns.
	go func() {
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: log})
		if err == nil {
			err = io.EOF
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		close(c.ended)
	}()
	return c, nil
}

// streamConn is an attach or exec stream as a net.Conn. It has no
// deadlines: the agent's client bounds its calls itself.
type streamConn struct {
	in     *io.PipeWriter // the process's standard input
	inR    *io.PipeReader
	out    *io.PipeReader // its standard output
	cancel context.CancelFunc
	ended  chan struct{}

	mu  sync.Mutex
	err error

	closeOnce sync.Once
	closed    atomic.Bool // Close was called
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.out.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close closes the process's standard input and ends the stream.
func (c *streamConn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.in.Close()
		c.out.Close()
		c.cancel()
	})
	return nil
}

// Ended is closed once the stream has ended.
func (c *streamConn) Ended() <-chan struct{} { return c.ended }

func (c *streamConn) LocalAddr() net.Addr              { return streamAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return streamAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

type streamAddr struct{}

func (streamAddr) Network() string { return "kubernetes" }
func (streamAddr) String() string  { return "pod-stream" }
