package e2b

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"
)

// This file is the exposed ports' path for a download: an HTTP/1 GET or
// HEAD with no body and no upgrade (a page, an asset, a file a dev server
// serves) goes to the sandbox's server over a connection this path owns,
// so that an answer of known length is moved from the sandbox's socket to
// the client's with splice(2) (exposedConn.SpliceTo; on native the
// sandbox's socket is the host's, decision 61) instead of through the
// reverse proxy's buffer. Everything else (bodies, WebSocket upgrades,
// HTTP/2) keeps the reverse proxy (ports.go). Each request is routed,
// admitted and answered on its own: the client's connection stays the
// daemon's, so its next request is routed by its own Host.

// h1Idle bounds how long an idle connection to a sandbox's port is kept,
// and h1MaxIdle how many are kept per port, as the reverse proxy's
// transport does.
const (
	h1Idle    = 30 * time.Second
	h1MaxIdle = 32
)

// splicedGet says whether r takes this path.
func splicedGet(r *http.Request) bool {
	return r.ProtoMajor == 1 && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.ContentLength == 0 && len(r.TransferEncoding) == 0 &&
		r.Header.Get("Upgrade") == "" && !hasToken(r.Header["Connection"], "upgrade")
}

// bodySplicer is what the supervisor's exposed connection offers: the next
// n bytes moved to w, counted.
type bodySplicer interface {
	SpliceTo(w io.Writer, n int64, buf []byte) (int64, error)
}

// h1Conn is a connection to a sandbox's port with its reader.
type h1Conn struct {
	net.Conn
	br    *bufio.Reader
	key   string
	timer *time.Timer // closes it when idle too long
}

// h1Pool keeps idle connections by "ID:PORT".
type h1Pool struct {
	mu     sync.Mutex
	idle   map[string][]*h1Conn
	closed bool
}

func (p *h1Pool) get(key string) *h1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[key]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	p.idle[key] = cs[:len(cs)-1]
	c.timer.Stop()
	return c
}

func (p *h1Pool) put(c *h1Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[c.key]) >= h1MaxIdle {
		c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[string][]*h1Conn{}
	}
	p.idle[c.key] = append(p.idle[c.key], c)
	if c.timer == nil {
		c.timer = time.AfterFunc(h1Idle, func() { p.expire(c) })
	} else {
		c.timer.Reset(h1Idle)
	}
}

// expire closes c if it is still idle.
func (p *h1Pool) expire(c *h1Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[c.key]
	for i, o := range cs {
		if o == c {
			p.idle[c.key] = append(cs[:i], cs[i+1:]...)
			c.Close()
			return
		}
	}
}

// close closes every idle connection; for good, the ones put back later
// too.
func (p *h1Pool) close(forGood bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = p.closed || forGood
	for _, cs := range p.idle {
		for _, c := range cs {
			c.timer.Stop()
			c.Close()
		}
	}
	p.idle = nil
}

// closeIdlePorts closes the idle connections to sandboxes' ports, the
// reverse proxy's and this path's.
func (h *Handler) closeIdlePorts() {
	h.proxy.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	h.h1.close(false)
}

// hopHeaders are the hop-by-hop headers a proxy does not pass on (RFC
// 9110, 7.6.1), as httputil.ReverseProxy's list.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// hasToken says whether the comma-separated values vv name tok.
func hasToken(vv []string, tok string) bool {
	for _, v := range vv {
		for t := range strings.SplitSeq(v, ",") {
			if t, _, _ = strings.Cut(t, ";"); strings.EqualFold(textproto.TrimString(t), tok) {
				return true
			}
		}
	}
	return false
}

// removeHops removes h's hop-by-hop headers, and those its Connection
// names.
func removeHops(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// serveSplicedGet proxies r (splicedGet) to the sandbox's port at key
// ("ID:PORT") as the reverse proxy would, with the answer's body spliced
// when it has a length.
func (h *Handler) serveSplicedGet(w http.ResponseWriter, r *http.Request, key string) {
	hdr := r.Header.Clone()
	removeHops(hdr)
	if hasToken(r.Header["Te"], "trailers") {
		hdr.Set("Te", "trailers")
	}
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		hdr.Del(k)
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr.Set("User-Agent", "") // Go's is not written
	}
	// The server in the sandbox sees the name it was asked by, as behind
	// E2B's proxy.
	out := &http.Request{Method: r.Method, Host: r.Host, Header: hdr,
		URL: &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}}
	c, resp, stop, err := h.roundTripH1(r.Context(), out, key)
	if err != nil {
		h.portFailed(w, r, err)
		return
	}
	reuse, err := h.answerH1(w, r, c, resp)
	if !stop() || !reuse || err != nil {
		c.Close()
	} else {
		h.h1.put(c)
	}
	if err != nil {
		// The client or the sandbox's server went away mid-answer: the
		// client's connection is cut, as the reverse proxy cuts it.
		panic(http.ErrAbortHandler)
	}
}

// roundTripH1 sends out on a pooled connection to key, or a new one, and
// reads its answer's header (1xx answers are returned too). A pooled
// connection that fails before any answer (its server closed it while
// idle) is replaced by a new one once: the request has no body and a
// GET or HEAD may be sent again. Until stop is called, ctx's end (the
// client went away) ends every read of the connection; stop says false
// once it has, and the connection must not be reused.
func (h *Handler) roundTripH1(ctx context.Context, out *http.Request, key string) (c *h1Conn, resp *http.Response, stop func() bool, err error) {
	for attempt := 0; ; attempt++ {
		c = h.h1.get(key)
		pooled := c != nil
		if !pooled {
			nc, err := h.dialPort(ctx, "tcp", key)
			if err != nil {
				return nil, nil, nil, err
			}
			c = &h1Conn{Conn: nc, br: bufio.NewReaderSize(nc, 64<<10), key: key}
		}
		cc := c
		stop = context.AfterFunc(ctx, func() { _ = cc.SetReadDeadline(time.Unix(1, 0)) })
		err = out.Write(c)
		if err == nil {
			_, err = c.br.Peek(1)
		}
		if err != nil {
			stop()
			c.Close()
			if pooled && attempt == 0 && ctx.Err() == nil {
				continue
			}
			return nil, nil, nil, fmt.Errorf("send the request to the sandbox's server: %w", err)
		}
		if resp, err = http.ReadResponse(c.br, out); err != nil {
			stop()
			c.Close()
			return nil, nil, nil, fmt.Errorf("read the sandbox's server's answer: %w", err)
		}
		return c, resp, stop, nil
	}
}

// answerH1 writes resp (and the answers after a 1xx) to w, and says
// whether c may take another request. An error is one after the answer
// began: the client's connection must be cut.
func (h *Handler) answerH1(w http.ResponseWriter, r *http.Request, c *h1Conn, resp *http.Response) (bool, error) {
	for resp.StatusCode >= 100 && resp.StatusCode < 200 {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			h.portFailed(w, r, errors.New("the sandbox's server switched protocols unasked"))
			return false, nil
		}
		removeHops(resp.Header)
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		clear(w.Header())
		var err error
		if resp, err = http.ReadResponse(c.br, resp.Request); err != nil {
			return false, err
		}
	}
	removeHops(resp.Header)
	copyHeader(w.Header(), resp.Header)
	if resp.Body == http.NoBody || r.Method == http.MethodHead {
		w.WriteHeader(resp.StatusCode)
		return !resp.Close, nil
	}
	if n := resp.ContentLength; n > 0 && len(resp.TransferEncoding) == 0 {
		w.WriteHeader(resp.StatusCode)
		// What the reader holds of the body goes first, then the rest
		// straight from the socket.
		b, _ := c.br.Peek(int(min(int64(c.br.Buffered()), n)))
		if _, err := w.Write(b); err != nil {
			return false, err
		}
		_, _ = c.br.Discard(len(b)) // b was peeked: it is buffered
		if err := http.NewResponseController(w).Flush(); err != nil {
			return false, err
		}
		if rest := n - int64(len(b)); rest > 0 {
			buf := portBufferPool.Get().([]byte)
			var err error
			if sp, ok := c.Conn.(bodySplicer); ok {
				_, err = sp.SpliceTo(w, rest, buf)
			} else if m, cerr := io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(c.Conn, rest), buf); cerr != nil || m < rest {
				err = cmp.Or(cerr, io.ErrUnexpectedEOF)
			}
			portBufferPool.Put(buf) //nolint:staticcheck // SA6002: as portBuffers
			if err != nil {
				return false, err
			}
		}
		return !resp.Close && c.br.Buffered() == 0, nil
	}
	// A body of unknown length (chunked, or to the connection's end):
	// copied and flushed as it comes, for answers that stream.
	if len(resp.Trailer) > 0 {
		keys := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		w.Header().Add("Trailer", strings.Join(keys, ", "))
	}
	announced := len(resp.Trailer)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return false, err
	}
	buf := portBufferPool.Get().([]byte)
	defer portBufferPool.Put(buf) //nolint:staticcheck // SA6002: as portBuffers
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, werr
			}
			if werr := rc.Flush(); werr != nil {
				return false, werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, err
		}
	}
	if len(resp.Trailer) == announced {
		copyHeader(w.Header(), resp.Trailer)
	} else {
		for k, vv := range resp.Trailer {
			for _, v := range vv {
				w.Header().Add(http.TrailerPrefix+k, v)
			}
		}
	}
	return !resp.Close, nil
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}
