package agentd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// egressServer is the agent's side of the egress tunnels: the listener on
// the proxy port and the connections accepted from it, waiting for a
// host stream each.
type egressServer struct {
	lns   []net.Listener
	conns chan accepted
	// tun is where a connection is handed to the host instead.
	tun *tunnelChannel
}

// accepted is a command's connection, to the proxy port or to a forward.
type accepted struct {
	c net.Conn
	// forward is the allowed address a forwarded connection goes to; ""
	// for the proxy port.
	forward string
}

// startEgress listens on the proxy port when the agent.Config asks for it. It
// runs before any command does, so no command can take the port first.
func startEgress(cfg *agent.EgressConfig, tun *tunnelChannel) (*egressServer, error) {
	if cfg == nil {
		return nil, nil
	}
	addr := cfg.Listen
	if addr == "" {
		addr = agent.EgressListen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on the egress proxy port %s: %w", addr, err)
	}
	e := &egressServer{lns: []net.Listener{ln}, conns: make(chan accepted), tun: tun}
	go e.accept(ln, "")
	for _, f := range cfg.Forward {
		fl, err := net.Listen("tcp", f)
		if err != nil {
			e.close()
			return nil, fmt.Errorf("listen on %s, an allowed address forwarded to the host: %w", f, err)
		}
		e.lns = append(e.lns, fl)
		go e.accept(fl, f)
	}
	return e, nil
}

// close stops listening.
func (e *egressServer) close() {
	for _, ln := range e.lns {
		ln.Close()
	}
}

func (e *egressServer) accept(ln net.Listener, forward string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // EMFILE and the like: the next accept may work
		}
		// Handed to the host where it took a tunnel channel (the
		// forwards' CONNECT is the agent's to speak: they take a stream).
		if forward == "" && e.tun.hand(c) {
			continue
		}
		// Waits for a host stream; the host keeps some ready.
		e.conns <- accepted{c: c, forward: forward}
	}
}

// register adds the Egress procedure to mux. Without the listener a call
// fails at once.
func (e *egressServer) register(mux *http.ServeMux) {
	mux.Handle(agent.ProcEgress, e)
}

// ServeHTTP serves an Egress call (see agent.ServeEgress): it waits for the
// host's ready message and a command's connection, then carries the
// connection's bytes both ways until both halves end.
func (e *egressServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	st, end, ok := openRaw(w, r, "egress")
	if !ok {
		return
	}
	if e == nil {
		end(connect.CodeFailedPrecondition, errors.New("this sandbox has no egress"))
		return
	}
	// The host's ready message.
	if err := st.skipMessage(); err != nil {
		return
	}
	var a accepted
	select {
	case a = <-e.conns:
	case <-r.Context().Done():
		return
	}
	c := a.c
	defer c.Close()
	if err := st.send(nil); err != nil {
		return
	}
	if a.forward != "" {
		if ok, err := connectForward(st, c, a.forward); !ok || err != nil {
			if err != nil {
				end(connect.CodeInternal, err)
			}
			return
		}
	}
	carry(st, c)
	end(0, nil)
}

// carry copies a stream's bytes to c and c's to the stream until both
// halves end.
func carry(st *rawStream, c net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Host to command, straight from the stream into the connection;
		// the host's end of its half shuts down writing.
		defer wg.Done()
		buf := make([]byte, agent.EgressChunkSize)
		for {
			n, err := st.read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					c.Close()
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
						return
					}
				}
				c.Close()
				return
			}
		}
	}()
	// Command to host: each read is one message, its prefix in front of
	// the bytes in the one buffer.
	buf := make([]byte, agent.EgressPrefixLen+agent.EgressChunkSize)
	for {
		n, err := c.Read(buf[agent.EgressPrefixLen:])
		if n > 0 {
			if serr := st.sendPrefixed(buf[:agent.EgressPrefixLen+n]); serr != nil {
				c.Close()
				break
			}
		}
		if err != nil {
			// An empty message tells the host that the command will send
			// no more (a half-close), while the host may still send.
			_ = st.send(nil)
			break
		}
	}
	// Ending the call ends the stream, so wait for the host's half first.
	wg.Wait()
}

// rawStream is the agent's side of an Egress call: the request body's
// messages in, the response's out.
type rawStream struct {
	body io.Reader
	w    io.Writer
	fl   http.Flusher
	left uint32 // bytes left of the message being read
	eof  bool
}

// send sends p as one message.
func (s *rawStream) send(p []byte) error {
	b := make([]byte, agent.EgressPrefixLen+len(p))
	copy(b[agent.EgressPrefixLen:], p)
	return s.sendPrefixed(b)
}

// sendPrefixed sends b[agent.EgressPrefixLen:] as one message, its prefix
// written into b's first bytes.
func (s *rawStream) sendPrefixed(b []byte) error {
	agent.PutEgressPrefix(b, len(b)-agent.EgressPrefixLen)
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	s.fl.Flush()
	return nil
}

// read reads bytes of the host's messages into p; io.EOF once the host
// has ended its half.
func (s *rawStream) read(p []byte) (int, error) {
	for s.left == 0 {
		if s.eof {
			return 0, io.EOF
		}
		n, end, err := agent.ReadEgressPrefix(s.body)
		switch {
		case errors.Is(err, io.EOF):
			s.eof = true
			return 0, io.EOF
		case err != nil:
			return 0, err
		case end:
			return 0, errors.New("egress stream: the host sent an end-of-stream message")
		}
		s.left = n
	}
	n, err := s.body.Read(p[:min(uint32(len(p)), s.left)])
	s.left -= uint32(n)
	if errors.Is(err, io.EOF) {
		if s.left > 0 {
			return n, io.ErrUnexpectedEOF
		}
		s.eof = true
		if n > 0 {
			err = nil
		}
	}
	return n, err
}

// message reads the next whole message, at most max bytes; io.EOF once
// the host has ended its half.
func (s *rawStream) message(max int) ([]byte, error) {
	if s.left != 0 {
		return nil, errors.New("egress stream: a message read in part")
	}
	if s.eof {
		return nil, io.EOF
	}
	n, end, err := agent.ReadEgressPrefix(s.body)
	switch {
	case errors.Is(err, io.EOF):
		s.eof = true
		return nil, io.EOF
	case err != nil:
		return nil, err
	case end:
		return nil, errors.New("egress stream: the host sent an end-of-stream message")
	case int(n) > max:
		return nil, fmt.Errorf("egress stream: a message of %d bytes, more than %d", n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// skipMessage reads one message and drops it.
func (s *rawStream) skipMessage() error {
	_, err := s.message(agent.MaxMessage)
	return err
}

// connectForward asks the proxy, over the stream, for a tunnel to the
// forwarded address, and says whether it was granted: then the stream
// carries the command's connection as it is. A refusal (the proxy's HTTP
// answer, which names the rule) is passed to the command, whose
// connection then ends.
func connectForward(st *rawStream, c net.Conn, addr string) (bool, error) {
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	if err := st.send([]byte(req)); err != nil {
		return false, err
	}
	var head []byte
	for {
		m, err := st.message(agent.EgressChunkSize)
		if err != nil {
			if errors.Is(err, io.EOF) {
				_, _ = c.Write(head)
				return false, nil
			}
			return false, err
		}
		head = append(head, m...)
		if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
			status := head[:i]
			if j := bytes.IndexByte(status, '\n'); j >= 0 {
				status = status[:j]
			}
			if f := bytes.Fields(status); len(f) >= 2 && string(f[1]) == "200" {
				// What followed the answer is the tunnel's first bytes.
				if rest := head[i+4:]; len(rest) > 0 {
					if _, err := c.Write(rest); err != nil {
						return false, nil
					}
				}
				return true, nil
			}
			// Refused: the command gets the proxy's answer and the end.
			_, _ = c.Write(head)
			for {
				m, err := st.message(agent.EgressChunkSize)
				if err != nil {
					return false, nil
				}
				if _, err := c.Write(m); err != nil {
					return false, nil
				}
			}
		}
		if len(head) > 16<<10 {
			return false, errors.New("the egress proxy's answer to a forward has no end of headers")
		}
	}
}

// caBundles are where a root's system bundle may be (Debian, Red Hat,
// Alpine); the first found is the one the sandbox's CA is added to.
var caBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// writeCABundle writes cfg.CABundle inside the sandbox: the root's own
// system bundle and the host's egress CA, which the variables the host
// set (SSL_CERT_FILE and others) point at. Without it, intercepted hosts
// fail TLS: closed.
func (s *server) writeCABundle(cfg *agent.EgressConfig) error {
	if cfg == nil || cfg.CA == "" || cfg.CABundle == "" {
		return nil
	}
	if err := s.files(func() error {
		var b bytes.Buffer
		for _, p := range caBundles {
			if _, err := s.root.ReadFile(p, 0, 16<<20, &b); err == nil {
				break
			}
			b.Reset()
		}
		if b.Len() > 0 && !bytes.HasSuffix(b.Bytes(), []byte("\n")) {
			b.WriteByte('\n')
		}
		b.WriteString(cfg.CA)
		if _, err := s.root.WriteFile(cfg.CABundle, &b, 0o644, 0); err != nil {
			return fmt.Errorf("write the egress CA bundle %s: %w", cfg.CABundle, err)
		}
		return nil
	}); err != nil {
		return err
	}
	s.bindSystemBundle(cfg.CABundle)
	return nil
}

// bindSystemBundle binds the bundle, read-only, over each system bundle
// path (caBundles) of the commands' root, so that a tool that ignores
// SSL_CERT_FILE and the others and reads the system's bundle trusts the
// CA too. The mounts are in the sandbox's own mount namespace: the host's
// bundle and other sandboxes' are untouched. Where the agent may not mount
// (a container runtime that withholds CAP_SYS_ADMIN), the bundle is only
// where the variables point, and a tool that ignores them fails closed;
// that is logged, not fatal.
func (s *server) bindSystemBundle(bundle string) {
	root := ""
	if fd := s.eng.workloadRoot; fd > 0 {
		// A contained agent's commands are chrooted into a bind of the
		// tree made before: mount inside that copy.
		root = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	for _, p := range caBundles {
		dst := root + p
		if fi, err := os.Stat(dst); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := unix.Mount(root+bundle, dst, "", unix.MS_BIND, ""); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-agent: the system CA bundle %s keeps the root's certificates only (tools must use SSL_CERT_FILE): bind: %v\n", p, err)
			continue
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
		if err := unix.Mount("", dst, "", flags, ""); err != nil {
			fmt.Fprintf(os.Stderr, "airlock-agent: make the system CA bundle %s read-only: %v\n", p, err)
		}
	}
}
