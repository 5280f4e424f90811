package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file serves exposed ports: E2B's sandbox.getHost(port) is
// "PORT-SANDBOXID.DOMAIN", DOMAIN being what the create answered (or
// E2B_DOMAIN). A request whose Host is such a name, on the daemon's
// listener or on the one for exposed ports only, is proxied to port on
// the sandbox's own loopback through its agent (supervisor.DialPort):
// HTTP/1.1, WebSocket upgrades, responses streamed as they come; a
// bodyless GET or HEAD with its answer's body spliced (ports_h1.go). The
// E2b-Sandbox-Id and E2b-Sandbox-Port headers reach the same, for a port
// that is neither envd's nor the code interpreter's.
//
// Who may: anybody who reaches the listener, unless the sandbox was made
// with network.allowPublicTraffic false; then the request must carry the
// sandbox's traffic access token in E2b-Traffic-Access-Token. Such a
// sandbox's envd token begins with privatePrefix, so that the choice is
// kept with the sandbox (a daemon that restarts keeps it private); the
// traffic token is derived from the envd token and opens nothing of envd.
// A template's expose_ports may ask the token of every sandbox
// ("token"), or expose nothing ("none").

// DefaultDomain is the domain of exposed ports' names when the config
// gives none: browsers and curl resolve every *.localhost name to the
// loopback.
const DefaultDomain = "sandbox.localhost"

// privatePrefix begins the envd token of a sandbox whose ports need the
// traffic token.
const privatePrefix = "private_"

// DomainFor is the domain the create answers name, from the configured
// one: that as it is, or DefaultDomain with the port of listen (where
// exposed ports are served) unless it is 80.
func DomainFor(configured, listen string) string {
	if configured != "" {
		return configured
	}
	if _, p, err := net.SplitHostPort(listen); err == nil && p != "80" && p != "0" && p != "" {
		return DefaultDomain + ":" + p
	}
	return DefaultDomain
}

// trafficToken is the token a private sandbox's exposed ports take: a
// digest of the envd token, which it does not reveal.
func trafficToken(info supervisor.Info) string {
	if info.Token == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(info.Token))
	m.Write([]byte("airlock e2b traffic access token"))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// trafficMatches says whether tok is the sandbox's traffic token.
func trafficMatches(info supervisor.Info, tok string) bool {
	want := trafficToken(info)
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(tok)) == 1
}

// private says whether the sandbox's ports need its traffic token.
func private(info supervisor.Info) bool { return strings.HasPrefix(info.Token, privatePrefix) }

// exposedHost parses a Host of the form PORT-ID.DOMAIN (any port of the
// listener after it); ok is false for any other.
func (h *Handler) exposedHost(host string) (port int, id string, ok bool) {
	if h.domainHost == "" {
		return 0, "", false
	}
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, found := strings.CutSuffix(host, "."+h.domainHost)
	if !found || strings.Contains(label, ".") {
		return 0, "", false
	}
	p, id, found := strings.Cut(label, "-")
	if !found {
		return 0, "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || p[0] == '0' || !sandbox.ValidID(id) {
		return 0, "", false
	}
	return n, id, true
}

// PortsHandler serves exposed ports only, for a listener of their own:
// every other request is not found.
func (h *Handler) PortsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if port, id, ok := h.exposedHost(r.Host); ok {
			h.servePort(w, r, id, port)
			return
		}
		portError(w, http.StatusNotFound, "this listener serves sandboxes' exposed ports only: ask for PORT-SANDBOXID.%s", h.domainHost)
	})
}

// needsToken says whether r lacks the traffic token that sandbox info's
// ports take: it was made private, or its template's expose_ports is
// "token".
func (h *Handler) needsToken(info supervisor.Info, r *http.Request) bool {
	if !private(info) && h.sup.ExposePorts(info.Template) != supervisor.ExposeToken {
		return false
	}
	return !trafficMatches(info, r.Header.Get("E2b-Traffic-Access-Token"))
}

// portTarget is what the proxy's dial needs to know of a request.
type portTarget struct {
	c    supervisor.Caller
	host string
}

type portTargetKey struct{}

// servePort admits a request for port of sandbox id and proxies it.
func (h *Handler) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	var info supervisor.Info
	err := sandbox.ErrNotFound
	counted := h.strangersGate(r) // as on envd's routes
	if sandbox.ValidID(id) {
		info, err = h.sup.SandboxGated(r.Context(), id, counted.allow)
	}
	if err == nil && !h.needsToken(info, r) && info.State == store.StatePaused {
		// Made with autoResume, its traffic resumes it (lifecycle.go).
		if info, err = h.woken(r.Context(), info); err != nil {
			h.log.Warn("exposed port: resume a paused sandbox", "sandbox", id, "err", err)
			portError(w, http.StatusBadGateway, "sandbox %s is paused, and its resume failed", truncate(id, 80))
			return
		}
	}
	switch {
	case err != nil && !errors.Is(err, sandbox.ErrNotFound):
		h.log.Error("exposed port: sandbox lookup failed", "sandbox", id, "err", err)
		portError(w, http.StatusInternalServerError, "internal error; the daemon's log has the details")
		return
	case (err != nil || info.State != store.StateRunning || h.needsToken(info, r)) && !counted.allow():
		// Guessing ids or tokens is rate limited, as on envd's routes.
		w.Header().Set("Retry-After", "1")
		portError(w, http.StatusTooManyRequests, "too many requests for sandboxes that are not running or without their traffic token; retry later")
		return
	case err != nil || info.State != store.StateRunning:
		portError(w, http.StatusBadGateway, "no running sandbox %s", truncate(id, 80))
		return
	case h.needsToken(info, r):
		// A sandbox of airlock's own API that no E2B connect gave a token
		// has no traffic token: nothing opens it.
		portError(w, http.StatusForbidden, "sandbox %s takes requests with its traffic access token only (network.allowPublicTraffic false, or its template's expose_ports): send its trafficAccessToken in the e2b-traffic-access-token header", id)
		return
	}
	c, err := h.ownerCaller(info)
	if err != nil {
		portError(w, http.StatusBadGateway, "%v", err)
		return
	}
	// The sandbox's server gets none of the sandbox's tokens.
	r.Header.Del("E2b-Traffic-Access-Token")
	r.Header.Del("X-Access-Token")
	ctx := context.WithValue(r.Context(), portTargetKey{}, &portTarget{c: c.sup, host: truncate(r.Host, 255)})
	r = r.WithContext(ctx)
	// The proxy dials "ID:PORT": its pool keeps each sandbox's port's
	// connections apart.
	r.URL.Scheme, r.URL.Host = "http", net.JoinHostPort(id, strconv.Itoa(port))
	if splicedGet(r) {
		h.serveSplicedGet(w, r, r.URL.Host)
		return
	}
	h.proxy.ServeHTTP(w, r)
}

// ServerProtocols are the protocols of a listener that serves exposed
// ports: HTTP/1.1, and HTTP/2 without TLS by prior knowledge (h2c; the
// standard library has no h2c Upgrade), which gRPC clients and a
// TLS-terminating proxy in front of the daemon speak. Browsers speak
// HTTP/2 only over TLS: to them the daemon is HTTP/1.1.
func ServerProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// newPortProxy is the reverse proxy of exposed ports.
func (h *Handler) newPortProxy() *httputil.ReverseProxy {
	tr := &http.Transport{
		DialContext:         h.dialPort,
		MaxIdleConnsPerHost: 32,
		// Each is a stream on the sandbox's agent connection (at most
		// agent.MaxStreams): one port cannot take them all.
		MaxConnsPerHost:    128,
		IdleConnTimeout:    30 * time.Second,
		DisableCompression: true,
	}
	// gRPC needs HTTP/2 end to end (trailers; its servers speak nothing
	// else): such a request that came as HTTP/2 goes on as h2c to the
	// sandbox's server. Every other request goes as HTTP/1.1, which every
	// server speaks (an HTTP/2 request to a server that speaks only
	// HTTP/1.1, as python3 -m http.server, would fail).
	h2 := tr.Clone()
	h2.Protocols = new(http.Protocols)
	h2.Protocols.SetUnencryptedHTTP2(true)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", pr.In.URL.Host
			// The server in the sandbox sees the name it was asked by, as
			// behind E2B's proxy.
			pr.Out.Host = pr.In.Host
		},
		Transport:     portTransport{h1: tr, h2: h2},
		FlushInterval: -1,
		// The agent sends up to 256 KiB a message: copy as much a write.
		BufferPool:   portBuffers{},
		ErrorHandler: h.portFailed,
	}
}

// portFailed answers a request whose proxying failed with err before the
// answer began.
func (h *Handler) portFailed(w http.ResponseWriter, r *http.Request, err error) {
	id, port, _ := strings.Cut(r.URL.Host, ":")
	var denied *policy.Denied
	switch {
	case errors.Is(err, sandbox.ErrPortClosed):
		portError(w, http.StatusBadGateway, "no process listens on port %s in sandbox %s: start a server on it (on 0.0.0.0 or 127.0.0.1)", port, id)
	case errors.Is(err, supervisor.ErrNotExposable):
		portError(w, http.StatusForbidden, "sandbox %s: its template does not expose ports", id)
	case errors.As(err, &denied):
		portError(w, http.StatusForbidden, "port %s of sandbox %s: %s", port, id, truncate(denied.Error(), 500))
	case errors.Is(err, context.Canceled):
		// The client went away.
	default:
		h.log.Warn("exposed port: proxy failed", "sandbox", id, "port", port, "err", err)
		portError(w, http.StatusBadGateway, "port %s of sandbox %s: %s", port, id, truncate(err.Error(), 300))
	}
}

// portTransport sends a gRPC request that came as HTTP/2 on as h2c, and
// every other as HTTP/1.1.
type portTransport struct{ h1, h2 *http.Transport }

func (t portTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.ProtoMajor == 2 && isGRPC(r.Header.Get("Content-Type")) {
		return t.h2.RoundTrip(r)
	}
	return t.h1.RoundTrip(r)
}

// CloseIdleConnections closes both transports' idle connections.
func (t portTransport) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.h2.CloseIdleConnections()
}

// isGRPC says whether a request's Content-Type is gRPC's
// (application/grpc, application/grpc+proto, ...).
func isGRPC(ct string) bool {
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// portBuffers are the proxy's copy buffers.
type portBuffers struct{}

var portBufferPool = sync.Pool{New: func() any { return make([]byte, 256<<10) }}

func (portBuffers) Get() []byte  { return portBufferPool.Get().([]byte) }
func (portBuffers) Put(b []byte) { portBufferPool.Put(b) } //nolint:staticcheck // SA6002: httputil.BufferPool hands slices; 256 KiB each, the header is small beside it

// dialPort connects the proxy to "ID:PORT" of the request's sandbox.
func (h *Handler) dialPort(ctx context.Context, _, addr string) (net.Conn, error) {
	t, _ := ctx.Value(portTargetKey{}).(*portTarget)
	if t == nil {
		return nil, errors.New("exposed port: a dial without its request")
	}
	id, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	return h.sup.DialPort(ctx, t.c, id, port, t.host)
}

// portError answers an exposed port's request that did not reach the
// sandbox, in plain text.
func portError(w http.ResponseWriter, status int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "airlock: "+format+"\n", args...)
}
