package agentd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"connectrpc.com/connect"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// egressServer is the agent's side of the egress tunnels: the listener on
// the proxy port and the connections accepted from it, waiting for a
// host stream each.
type egressServer struct {
	lns   []net.Listener
	conns chan accepted
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
func startEgress(cfg *agent.EgressConfig) (*egressServer, error) {
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
	e := &egressServer{lns: []net.Listener{ln}, conns: make(chan accepted)}
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
		// Waits for a host stream; the host keeps some ready.
		e.conns <- accepted{c: c, forward: forward}
	}
}

// register adds the Egress procedure to mux. Without the listener a call
// fails at once.
func (e *egressServer) register(mux *http.ServeMux) {
	mux.Handle(agent.ProcEgress, connect.NewBidiStreamHandler(agent.ProcEgress, e.serve, agent.EgressHandlerOptions()...))
}

// serve waits for the host's ready message and a command's connection,
// then carries the connection's bytes both ways until both halves end.
func (e *egressServer) serve(ctx context.Context, stream *connect.BidiStream[agent.EgressChunk, agent.EgressChunk]) error {
	if e == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("this sandbox has no egress"))
	}
	if _, err := stream.Receive(); err != nil {
		return err
	}
	var a accepted
	select {
	case a = <-e.conns:
	case <-ctx.Done():
		return ctx.Err()
	}
	c := a.c
	defer c.Close()
	if err := stream.Send(&agent.EgressChunk{}); err != nil {
		return err
	}
	if a.forward != "" {
		if ok, err := connectForward(stream, c, a.forward); !ok || err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Host to command; the host's end of its half shuts down writing.
		defer wg.Done()
		var m agent.EgressChunk // its buffer is reused
		for {
			m.Data = m.Data[:0] // Connect does not unmarshal empty messages
			err := stream.Conn().Receive(&m)
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
			if _, err := c.Write(m.Data); err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, agent.EgressChunkSize)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if serr := stream.Send(&agent.EgressChunk{Data: buf[:n]}); serr != nil {
				c.Close()
				break
			}
		}
		if err != nil {
			// An empty chunk tells the host that the command will send
			// no more (a half-close), while the host may still send.
			_ = stream.Send(&agent.EgressChunk{})
			break
		}
	}
	// Returning ends the stream, so wait for the host's half first.
	wg.Wait()
	return nil
}

// connectForward asks the proxy, over the stream, for a tunnel to the
// forwarded address, and says whether it was granted: then the stream
// carries the command's connection as it is. A refusal (the proxy's HTTP
// answer, which names the rule) is passed to the command, whose
// connection then ends.
func connectForward(stream *connect.BidiStream[agent.EgressChunk, agent.EgressChunk], c net.Conn, addr string) (bool, error) {
	req := "CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	if err := stream.Send(&agent.EgressChunk{Data: []byte(req)}); err != nil {
		return false, err
	}
	var head []byte
	var m agent.EgressChunk
	for {
		m.Data = m.Data[:0]
		if err := stream.Conn().Receive(&m); err != nil {
			if errors.Is(err, io.EOF) {
				_, _ = c.Write(head)
				return false, nil
			}
			return false, err
		}
		head = append(head, m.Data...)
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
				m.Data = m.Data[:0]
				if err := stream.Conn().Receive(&m); err != nil {
					return false, nil
				}
				if _, err := c.Write(m.Data); err != nil {
					return false, nil
				}
			}
		}
		if len(head) > 16<<10 {
			return false, errors.New("the egress proxy's answer to a forward has no end of headers")
		}
	}
}
