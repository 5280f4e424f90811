package agentd

import (
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
	ln    net.Listener
	conns chan net.Conn
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
	e := &egressServer{ln: ln, conns: make(chan net.Conn)}
	go e.accept()
	return e, nil
}

func (e *egressServer) accept() {
	for {
		c, err := e.ln.Accept()
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
		e.conns <- c
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
	var c net.Conn
	select {
	case c = <-e.conns:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer c.Close()
	if err := stream.Send(&agent.EgressChunk{}); err != nil {
		return err
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
