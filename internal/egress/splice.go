package egress

import (
	"bufio"
	"io"
	"net"
)

// spliceChunk is the most one splice round moves before the tunnel's
// counts and the byte budget are brought up to date.
const spliceChunk = 1 << 20

// reserve takes up to want bytes of the byte budget for one splice round
// (what countedConn's copies then see as spent), and returns how many it
// took: 0 once the budget is spent.
func (s *Sandbox) reserve(want int64) int64 {
	for {
		r := s.reserved.Load()
		k := min(want, s.p.opts.Limits.MaxBytes-s.bytesUsed()-r)
		if k <= 0 {
			return 0
		}
		if s.reserved.CompareAndSwap(r, r+k) {
			return k
		}
	}
}

// toUpstream copies what the client sends through a CONNECT tunnel
// (first what br holds already, then c's bytes) to cu, the counted
// upstream connection.
func (s *Sandbox) toUpstream(cu *countedConn, c net.Conn, br *bufio.Reader) {
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := cu.Write(b); err != nil {
			return
		}
		_, _ = br.Discard(n)
	}
	if s.splice(cu.Conn, c, &cu.d.sent, &s.sent) {
		return
	}
	_, _ = io.Copy(cu, br)
}

// fromUpstream copies upstream's bytes, through cu, to the client c.
func (s *Sandbox) fromUpstream(c net.Conn, cu *countedConn) {
	if s.splice(c, cu.Conn, &cu.d.recv, &s.recv) {
		return
	}
	_, _ = io.Copy(c, cu)
}
