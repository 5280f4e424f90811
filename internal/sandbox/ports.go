package sandbox

import (
	"context"
	"errors"
	"net"
)

// ErrPortClosed says that no process listens on the port in the sandbox.
var ErrPortClosed = errors.New("no process listens on that port in the sandbox")

// PortDialer is an instance that can connect to a TCP port on the
// sandbox's own loopback, from inside its network namespace, for the
// daemon to serve it from outside (an exposed port). Every driver that
// runs airlock's agent does it through the agent's connection, so no
// namespace gains a route.
type PortDialer interface {
	// DialPort connects to port on the sandbox's loopback. An error
	// wrapping ErrPortClosed says nothing listens there.
	DialPort(ctx context.Context, port int) (net.Conn, error)
}
