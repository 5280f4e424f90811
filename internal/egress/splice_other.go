//go:build !linux

package egress

import (
	"net"
	"sync/atomic"
)

// splice is Linux's: elsewhere tunnels are copied.
func (s *Sandbox) splice(_, _ net.Conn, _ *int64, _ *atomic.Int64) bool { return false }

func (s *Sandbox) spliceN(_, _ net.Conn, _ int64, _ *int64, _ *atomic.Int64) (int64, bool) {
	return 0, false
}
