package testrig

import (
	"io"
	"net"
	"time"
)

// SlowProxy relays the connections made to a loopback port of its own to
// host, sending host's answers at rate bytes a second (a registry's
// blobs, slowed so that a test can watch a pull while it lasts). It
// returns its address ("127.0.0.1:PORT") and a function that stops it.
func SlowProxy(host string, rate int) (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go relaySlowly(c, host, rate)
		}
	}()
	return l.Addr().String(), func() { l.Close() }, nil
}

func relaySlowly(c net.Conn, host string, rate int) {
	defer c.Close()
	up, err := net.Dial("tcp", host)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
			time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
		}
		if err != nil {
			return
		}
	}
}
