//go:build !linux

package agent

import (
	"context"
	"net"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// DialLocal is Dial: tunnels and exec sockets are handed over on Linux
// only.
func DialLocal(ctx context.Context, c net.Conn, _ bool) (*Client, []sandbox.Layer, error) {
	return Dial(ctx, c)
}

// tunnels never exists off Linux.
type tunnels struct{}

func (*tunnels) close()                         {}
func (*tunnels) setServe(func(net.Conn)) func() { return func() {} }

func (*tunnels) dial(context.Context, int) (net.Conn, error) {
	return nil, sandbox.ErrUnsupported
}

// lazyTunnels never exists off Linux.
type lazyTunnels struct{}

func (*lazyTunnels) close() {}

func (*lazyTunnels) dial(context.Context, int) (net.Conn, error) {
	return nil, sandbox.ErrUnsupported
}

// rightsConn never exists off Linux.
type rightsConn struct{}

func (*rightsConn) closeExecs() {}

func (c *Client) openSocketExec(context.Context, *ExecInput, bool, string) (*Exec, error) {
	return nil, sandbox.ErrUnsupported
}
