package supervisor

import (
	"io"
	"net"
)

// spliceRound bounds the bytes one round of SpliceTo moves before it adds
// them to the counts: the summary lags what moved by at most this much.
const spliceRound = 1 << 20

// SpliceTo moves the next n bytes the sandbox's server sends on the
// connection to w (an exposed port's answer body, going to the client),
// counted in the connection's and its port's bytes as a Read counts them.
// When the connection is a host TCP socket (native: the agent handed the
// sandbox's own socket over, decision 61; or a connection whose NetConn
// is one, a lazy channel's: decision 87) and w takes a ReadFrom that
// reaches the client's TCP socket (http.Server's ResponseWriter does, for
// a body of known length), Go moves the bytes with splice(2) and they
// never enter the daemon's memory; otherwise they are copied through buf
// (a stream of the agent's connection: its messages' size is the copy's
// best). Fewer than n bytes is an error (io.ErrUnexpectedEOF at the
// connection's end).
func (c *exposedConn) SpliceTo(w io.Writer, n int64, buf []byte) (int64, error) {
	tc, ok := c.Conn.(*net.TCPConn)
	if nc, wraps := c.Conn.(interface{ NetConn() net.Conn }); !ok && wraps {
		tc, ok = nc.NetConn().(*net.TCPConn)
	}
	rf, ok2 := w.(io.ReaderFrom)
	if !ok || !ok2 {
		m, err := io.CopyBuffer(writerOnly{w}, io.LimitReader(c, n), buf)
		if err == nil && m < n {
			err = io.ErrUnexpectedEOF
		}
		return m, err
	}
	var moved int64
	for moved < n {
		k, err := rf.ReadFrom(&io.LimitedReader{R: tc, N: min(n-moved, spliceRound)})
		moved += k
		c.received.Add(k)
		c.pc.received.Add(k)
		if err != nil {
			return moved, err
		}
		if k == 0 {
			return moved, io.ErrUnexpectedEOF
		}
	}
	return moved, nil
}

// writerOnly hides a writer's ReadFrom, so that io.CopyBuffer uses the
// buffer it is given.
type writerOnly struct{ io.Writer }
