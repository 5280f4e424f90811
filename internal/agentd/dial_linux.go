package agentd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/airlock-sandbox/airlock/internal/agent"
)

// serveDial serves a Dial call (see agent.DialPort): it connects to the
// port the host names on the sandbox's loopback (127.0.0.1, then ::1),
// answers "accepted", and carries the connection's bytes both ways until
// both halves end. Nothing listening there ends the call not_found.
func serveDial(w http.ResponseWriter, r *http.Request) {
	st, end, ok := openRaw(w, r, "dial")
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.Header.Get(agent.DialPortHeader))
	if err != nil || port < 1 || port > 65535 {
		end(connect.CodeInvalidArgument, fmt.Errorf("dial: port %q is not 1 to 65535", r.Header.Get(agent.DialPortHeader)))
		return
	}
	// The host's ready message.
	if err := st.skipMessage(); err != nil {
		return
	}
	c, err := dialLoopback(r.Context(), port)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			end(connect.CodeNotFound, fmt.Errorf("no process listens on port %d in the sandbox", port))
			return
		}
		end(connect.CodeUnavailable, fmt.Errorf("connect to port %d in the sandbox: %w", port, err))
		return
	}
	defer c.Close()
	if err := st.send(nil); err != nil {
		return
	}
	carry(st, c)
	end(0, nil)
}

// dialLoopback connects to port on 127.0.0.1, or on ::1 when nothing
// listens on the first (a server bound to ::1 only).
func dialLoopback(ctx context.Context, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	p := strconv.Itoa(port)
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return c, err
	}
	if c6, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", p)); err6 == nil {
		return c6, nil
	}
	return nil, err
}

// openRaw starts the answer to a call in the Egress stream's wire (an
// Egress or a Dial): it checks the request, and returns the stream and
// the function that ends the call with a code (0: success). what names
// the stream in the refusal of a request that cannot carry it.
func openRaw(w http.ResponseWriter, r *http.Request, what string) (*rawStream, func(connect.Code, error), bool) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != agent.EgressContentType {
		w.Header().Set("Accept-Post", agent.EgressContentType)
		http.Error(w, "send a POST of "+agent.EgressContentType, http.StatusUnsupportedMediaType)
		return nil, nil, false
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "the "+what+" stream needs HTTP/2", http.StatusHTTPVersionNotSupported)
		return nil, nil, false
	}
	w.Header().Set("Content-Type", agent.EgressContentType)
	end := func(code connect.Code, err error) {
		// The status and headers go with the end when nothing was sent.
		_, _ = w.Write(agent.EgressEnd(code, err))
		fl.Flush()
	}
	return &rawStream{body: r.Body, w: w, fl: fl}, end, true
}
