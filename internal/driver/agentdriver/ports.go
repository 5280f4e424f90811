package agentdriver

import (
	"context"
	"net"
)

// DialPort connects to port on the sandbox's loopback through the agent
// (sandbox.PortDialer).
func (in *Instance) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return in.client.DialPort(ctx, port)
}
