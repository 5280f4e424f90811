package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// splice moves src's bytes to dst in the kernel (splice(2), through a
// pipe: Go's TCPConn.ReadFrom does it for a TCP source), when both are
// TCP connections: a tunnel the agent handed over (agent/tunnel.go) to a
// real upstream. Each round waits until src has bytes, reserves that
// many (at most spliceChunk) of the sandbox's byte budget, moves them,
// and adds them to the request's count and the sandbox's, so that the
// summary, the audit and the budget see every byte, as countedConn does
// for a copy: the budget ends the tunnel at the byte. A round moves only
// bytes already there, so it never holds a reservation while it waits.
// splice reports true when the tunnel's half has ended (its end, an
// error, or the budget), and false when the caller must copy the rest
// through countedConn: the connections are not both TCP, or src woke with
// nothing to read.
func (s *Sandbox) splice(dst, src net.Conn, count *int64, total *atomic.Int64) bool {
	_, done := s.spliceN(dst, src, -1, count, total)
	return done
}

// spliceN is splice of at most limit bytes (all of them when limit is
// negative); it returns how many it moved, and stops at limit with done.
func (s *Sandbox) spliceN(dst, src net.Conn, limit int64, count *int64, total *atomic.Int64) (moved int64, done bool) {
	d, ok := dst.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	sc, ok := src.(*net.TCPConn)
	if !ok {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	for limit < 0 || moved < limit {
		var avail int
		var ended bool
		var one [1]byte
		if err := raw.Read(func(fd uintptr) bool {
			if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && v > 0 {
				avail = v
				return true
			}
			// Nothing queued: wait only when a read would (EAGAIN), as
			// the poller expects; an end or an error is the copy's.
			// Bytes that came after the ioctl are neither: they are
			// spliced (reading them as the end cut bodies short).
			n, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EAGAIN):
				return false
			case err == nil && n > 0:
				avail = n
				if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil && v > n {
					avail = v
				}
			default:
				ended = true
			}
			return true
		}); err != nil {
			return moved, true
		}
		if ended {
			// Its end or an error, which a copy reports.
			return moved, false
		}
		want := min(int64(avail), spliceChunk)
		if limit >= 0 {
			want = min(want, limit-moved)
		}
		k := s.reserve(want)
		if k == 0 {
			return moved, true // errBudget: the caller ends the tunnel
		}
		n, err := d.ReadFrom(&io.LimitedReader{R: sc, N: k})
		total.Add(n)
		atomic.AddInt64(count, n)
		s.reserved.Add(-k)
		moved += n
		if err != nil || n == 0 {
			return moved, true
		}
	}
	return moved, true
}
