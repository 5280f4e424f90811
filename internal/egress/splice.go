package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
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

// spliceBody writes resp, a plain-HTTP answer of known length whose body
// nobody needs to read (no secret of its host could be in it), to the
// client c, its body moved by splice from up: the status line and headers
// as resp.Write writes them, what br holds of the body already, then the
// rest of the body, exactly its length (an upstream that sends more cannot
// smuggle an answer onto the client's connection), counted and within
// the budget. It reports handled false, having written nothing, when the
// connections are not both TCP or the answer is not of that kind; ok says
// the client's connection may carry another request.
func (s *Sandbox) spliceBody(c net.Conn, bw *bufio.Writer, cu *countedConn, br *bufio.Reader, req *http.Request, resp *http.Response) (handled, ok bool) {
	n := resp.ContentLength
	_, ctcp := c.(*net.TCPConn)
	_, utcp := cu.Conn.(*net.TCPConn)
	if !ctcp || !utcp || n < spliceMin || len(resp.TransferEncoding) > 0 || req.Method == http.MethodHead {
		return false, false
	}
	fmt.Fprintf(bw, "HTTP/%d.%d %s\r\n", resp.ProtoMajor, resp.ProtoMinor, resp.Status)
	if err := resp.Header.WriteSubset(bw, map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Trailer": true, "Connection": true}); err != nil {
		return true, false
	}
	fmt.Fprintf(bw, "Content-Length: %d\r\n", n)
	if resp.Close {
		_, _ = bw.WriteString("Connection: close\r\n") // a bufio.Writer's error sticks: the Flush below reports it
	}
	_, _ = bw.WriteString("\r\n")
	k := min(int64(br.Buffered()), n)
	if k > 0 {
		b, _ := br.Peek(int(k))
		if _, err := bw.Write(b); err != nil {
			return true, false
		}
		_, _ = br.Discard(int(k))
	}
	if err := bw.Flush(); err != nil {
		return true, false
	}
	moved, _ := s.spliceN(c, cu.Conn, n-k, &cu.d.recv, &s.recv)
	if moved < n-k {
		// Upstream ended early, or the budget did: the client's
		// connection cannot carry another answer.
		return true, false
	}
	return true, !resp.Close
}

// spliceMin is the smallest body spliceBody moves: below it a copy costs
// less than the pipe and the calls.
const spliceMin = 64 << 10
