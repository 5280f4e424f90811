package agentd

import (
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
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != agent.EgressContentType {
		w.Header().Set("Accept-Post", agent.EgressContentType)
		http.Error(w, "send a POST of "+agent.EgressContentType, http.StatusUnsupportedMediaType)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "the dial stream needs HTTP/2", http.StatusHTTPVersionNotSupported)
		return
	}
	st := &rawStream{body: r.Body, w: w, fl: fl}
	w.Header().Set("Content-Type", agent.EgressContentType)
	end := func(code connect.Code, err error) {
		_, _ = w.Write(agent.EgressEnd(code, err))
		fl.Flush()
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
	c, err := dialLoopback(r, port)
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
func dialLoopback(r *http.Request, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	p := strconv.Itoa(port)
	c, err := d.DialContext(r.Context(), "tcp", net.JoinHostPort("127.0.0.1", p))
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return c, err
	}
	if c6, err6 := d.DialContext(r.Context(), "tcp", net.JoinHostPort("::1", p)); err6 == nil {
		return c6, nil
	}
	return nil, err
}
