package docker

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
)

// streamConn is the hijacked attach (or exec) connection of a process
// without a terminal, seen as the agent's byte stream: writes go to the
// process's standard input as they are; reads return what it writes to
// standard output. The engine multiplexes standard output and standard
// error in frames (a header of 8 bytes: the stream, three zero bytes, the
// length big-endian); standard error goes to log.
type streamConn struct {
	net.Conn
	r   *bufio.Reader
	log io.Writer
	// left is what remains of the current standard-output frame. Reads
	// come from one goroutine (the HTTP/2 client's reader).
	left int
}

// maxFrame bounds one frame's length: the agent is untrusted.
const maxFrame = 16 << 20

func newStreamConn(c net.Conn, r *bufio.Reader, log io.Writer) *streamConn {
	if r == nil {
		r = bufio.NewReader(c)
	}
	return &streamConn{Conn: c, r: r, log: log}
}

func (c *streamConn) Read(p []byte) (int, error) {
	for c.left == 0 {
		var hdr [8]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > maxFrame {
			return 0, fmt.Errorf("the engine's stream has a frame of %d bytes", n)
		}
		switch hdr[0] {
		case 1:
			c.left = int(n)
		case 2:
			if _, err := io.CopyN(c.log, c.r, int64(n)); err != nil {
				return 0, err
			}
		default:
			if _, err := io.CopyN(io.Discard, c.r, int64(n)); err != nil {
				return 0, err
			}
		}
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= n
	return n, err
}
