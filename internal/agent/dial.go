package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Dial streams: a sandbox's exposed port.
//
// The host opens a Dial stream naming a port (DialPortHeader); the agent
// connects to that port on the sandbox's loopback, inside the sandbox's
// network namespace, and answers "accepted" once connected, or ends the
// call not_found when nothing listens there. The stream then carries the
// connection both ways, in the Egress stream's wire (egresswire.go), so
// a daemon reaches a server in the sandbox without any namespace gaining
// a route. The host asks; the sandbox never opens a Dial.

// ProcDial is the Dial procedure's path.
const ProcDial = service + "Dial"

// DialPortHeader names the port a Dial call connects to, 1 to 65535.
const DialPortHeader = "Airlock-Dial-Port"

// DialPort connects to port on the sandbox's loopback through the agent.
// An error wrapping sandbox.ErrPortClosed says nothing listens there.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrInvalid)
	}
	if c.tun != nil {
		return c.tun.dial(ctx, port)
	}
	if c.lazy != nil {
		return c.lazy.dial(ctx, port)
	}
	// The connection outlives ctx (an HTTP client's dial context may end
	// while its connection is pooled): ctx bounds only the connecting.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	sc, err := c.openStream(sctx, ProcDial, http.Header{DialPortHeader: {strconv.Itoa(port)}})
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
	} else {
		inner := sc.cancel
		sc.cancel = func() { inner(); cancel() }
	}
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return nil, fmt.Errorf("port %d: %w", port, sandbox.ErrPortClosed)
	case err != nil:
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, err)
	}
	return sc, nil
}

func truncate512(msg string) string {
	if len(msg) > 512 {
		return msg[:512] + "…"
	}
	return msg
}
