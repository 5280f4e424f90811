// Package e2b serves the API the official E2B SDKs speak, on the daemon's
// own listener, so that an agent written for E2B runs against airlock with
// three environment variables changed:
//
//	E2B_API_URL=http://127.0.0.1:7070  E2B_SANDBOX_URL=http://127.0.0.1:7070
//	E2B_API_KEY=$(airlock keys create --e2b ...)
//
// Three surfaces share the listener with airlock's own API (whose paths
// are all under /v1, /mcp and a few public ones):
//
//   - the control API (sandboxes.go): /sandboxes and /v2/sandboxes, with
//     the key in X-API-KEY and errors as {"code": 404, "message": "..."};
//   - envd, the API of one sandbox, chosen by the E2b-Sandbox-Id header
//     with E2b-Sandbox-Port 49983 (envd.go): /health, /files, and the
//     Process and Filesystem services in Connect's JSON protocol, checked
//     against the sandbox's own access token (X-Access-Token), which the
//     create and connect answers hand out;
//   - the code interpreter, the same header with port 49999
//     (interpreter.go): /execute and /contexts, backed by a Jupyter kernel
//     that runs inside the sandbox.
//
// Everything goes through the supervisor as airlock's own API does: the
// key's quotas, rate limits and in-flight cap, the policy (and a person's
// approval where it asks for one), and the audit log. The message types
// are written from the field lists of the SDKs' protocol (messages.go);
// no file of E2B's is copied.
package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// EnvdVersion is the version of E2B's in-sandbox daemon that the create
// and connect answers advertise; the SDKs switch features on it. 0.5.7 has
// everything airlock implements: recursive watches (0.1.4), the stdin
// flag (0.3.0), no forced user (0.4.0), CloseStdin (0.5.2) and
// octet-stream uploads (0.5.7). File metadata as extended attributes
// (0.6.2) and watch events with entries (0.6.3) are not implemented.
const EnvdVersion = "0.5.7"

// The ports E2B's SDKs name in the E2b-Sandbox-Port header.
const (
	envdPort        = "49983"
	interpreterPort = "49999"
)

// Options configure a Handler.
type Options struct {
	// Supervisor runs the sandboxes. Required.
	Supervisor *supervisor.Supervisor
	// Store holds the API keys. Required.
	Store *store.Store
	// API is airlock's own API: it serves every request that is not
	// E2B's, and checks Host and Origin for those that are. Required.
	API *api.Server
	// Config maps E2B's template names (supervisor.E2BConfig, defaults
	// filled in). Zero: no template names, every create is not found.
	Config supervisor.E2BConfig
	// Logger receives request errors. Nil discards them.
	Logger *slog.Logger
	// Keepalive bounds the silence on a stream (process output, a watch,
	// an execution) before a keepalive goes out; a shorter interval the
	// client asks for (Keepalive-Ping-Interval) wins. Zero: 15 s.
	Keepalive time.Duration
	// WatchInterval is how often a directory watch looks for changes.
	// Zero: 100 ms.
	WatchInterval time.Duration
	// MaxUpload bounds one upload to /files (the sandbox's disk bounds it
	// further). Zero: 1 GiB.
	MaxUpload int64
	// Domain is what exposed ports' names end in (ports.go), as the
	// create answers name it: "sandbox.localhost:7070", "sbx.example.com".
	// Empty: Config.Domain, else DefaultDomain.
	Domain string
}

// Handler serves the E2B endpoints and passes everything else to the
// API.
type Handler struct {
	opts      Options
	sup       *supervisor.Supervisor
	st        *store.Store
	api       *api.Server
	log       *slog.Logger
	templates map[string]string
	warm      map[string]bool

	control *http.ServeMux
	envd    *http.ServeMux
	interp  *http.ServeMux

	kernels kernels
	watches watchers
	// streams counts each sandbox's open WatchDir streams.
	streams watchStreams
	// strangers bounds the requests for a sandbox that show no right to
	// it (envd.go).
	strangers strangers

	// bg tracks work that outlives its request (a kernel started for a new
	// sandbox); Close waits for it.
	bg     sync.WaitGroup
	stop   chan struct{}
	closed sync.Once

	// domain is Options.Domain; domainHost, its host name, lower case.
	domain, domainHost string
	proxy              *httputil.ReverseProxy
	h1                 h1Pool // connections of the spliced path (ports_h1.go)
}

// New makes the handler.
func New(opts Options) (*Handler, error) {
	if opts.Supervisor == nil || opts.Store == nil || opts.API == nil {
		return nil, errors.New("e2b: a supervisor, a store and the API are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = 100 * time.Millisecond
	}
	if opts.MaxUpload <= 0 {
		opts.MaxUpload = 1 << 30
	}
	h := &Handler{
		opts: opts, sup: opts.Supervisor, st: opts.Store, api: opts.API, log: opts.Logger,
		templates: opts.Config.TemplateMap(), warm: map[string]bool{},
		control: http.NewServeMux(), envd: http.NewServeMux(), interp: http.NewServeMux(),
		stop: make(chan struct{}),
	}
	h.domain = cmp.Or(opts.Domain, opts.Config.Domain, DefaultDomain)
	h.domainHost = h.domain
	if hh, _, err := net.SplitHostPort(h.domain); err == nil {
		h.domainHost = hh
	}
	h.domainHost = strings.ToLower(strings.TrimSuffix(h.domainHost, "."))
	h.proxy = h.newPortProxy()
	for _, n := range opts.Config.Interpreter {
		h.warm[n] = true
	}
	h.warnPools()
	h.kernels.by = map[string]*sandboxKernels{}
	h.watches.by = map[string]*watcher{}
	h.streams.by = map[string]int{}
	h.strangers.init()
	h.routeControl()
	h.routeEnvd()
	h.routeInterpreter()
	return h, nil
}

// warnPools says which warm pools the E2B endpoints' creates cannot claim
// from: a pooled sandbox was built without E2B's home unless its template
// gives it (home = "/home/user").
func (h *Handler) warnPools() {
	mapped := map[string]bool{}
	for _, t := range h.templates {
		mapped[t] = true
	}
	for _, t := range h.sup.Templates() {
		if mapped[t.Name] && t.Pool > 0 && t.Home != sandbox.E2BHome {
			h.log.Warn("the E2B endpoints' sandboxes get E2B's home, which this template's pooled sandboxes lack: E2B creates start a sandbox instead of claiming one; give the template home = \"/home/user\"",
				"template", t.Name, "home", sandbox.HomeOf(t.Home))
		}
	}
}

// Close stops the handler's background work (kernels being started for
// new sandboxes) and waits for it, within ctx.
func (h *Handler) Close(ctx context.Context) error {
	h.closed.Do(func() { close(h.stop); h.h1.close(true) })
	done := make(chan struct{})
	go func() { h.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP routes E2B's requests and passes the rest to the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if port, id, ok := h.exposedHost(r.Host); ok {
		h.servePort(w, r, id, port)
		return
	}
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" && !controlPath(r.URL.Path) {
		h.api.ServeHTTP(w, r)
		return
	}
	if err := h.api.CheckHost(r); err != nil {
		h.writeError(w, r, err)
		return
	}
	if id == "" {
		h.control.ServeHTTP(w, r)
		return
	}
	h.serveSandbox(w, r, id)
}

// controlPath says whether p is a path of E2B's control API.
func controlPath(p string) bool {
	for _, pre := range []string{"/sandboxes", "/v2/sandboxes"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

// errorBody is E2B's error: the HTTP status again, and a message.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// httpError is an error with the status E2B's SDKs map to their error
// classes (401 authentication, 404 not found, 429 rate limit, 502 the
// sandbox is gone, 503 busy, 507 no space, other 4xx and 5xx).
type httpError struct {
	status int
	msg    string
	// retryAfter sets Retry-After (the SDKs retry a 429 that has one).
	retryAfter time.Duration
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// classify turns an error of the supervisor, the store, a driver or this
// package into E2B's status and a message that names no host path.
func (h *Handler) classify(r *http.Request, err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	e := api.Classify(err)
	status := e.Status
	switch e.Code {
	case "forbidden":
		// Another key's sandbox is, to this key, one that does not exist.
		status = http.StatusNotFound
	case "not_running":
		status = http.StatusNotFound
	case "quota_exceeded", "rate_limited":
		status = http.StatusTooManyRequests
	case "limit":
		status = http.StatusInsufficientStorage
	case "internal":
		h.log.Error("e2b request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		return &httpError{status: http.StatusInternalServerError, msg: "internal error; the daemon's log has the details"}
	}
	msg := e.Message
	if e.Code == "forbidden" {
		msg = "not found: no sandbox of this key has that id"
	}
	return &httpError{status: status, msg: msg, retryAfter: e.RetryAfter}
}

// writeError writes err as E2B's error body.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := h.classify(r, err)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int(e.retryAfter.Seconds()+0.999)))
	}
	writeJSON(w, e.status, errorBody{Code: e.status, Message: truncate(e.msg, 2000)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// newToken makes a random secret: 32 hex digits.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// caller is whom a request acts for.
type caller struct {
	key store.Key
	sup supervisor.Caller
}

// keyCaller authenticates a control API request: the key in X-API-KEY
// (what the SDKs send), or airlock's Authorization: Bearer.
func (h *Handler) keyCaller(r *http.Request) (*caller, error) {
	secret := strings.TrimSpace(r.Header.Get("X-Api-Key"))
	if secret == "" {
		if scheme, s, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			secret = strings.TrimSpace(s)
		}
	}
	if secret == "" {
		return nil, errorf(http.StatusUnauthorized, "no API key: set E2B_API_KEY to a key from `airlock keys create --e2b`")
	}
	k, err := h.st.KeyBySecret(secret)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, errorf(http.StatusUnauthorized, "unknown or revoked API key")
	}
	if err != nil {
		return nil, err
	}
	return &caller{key: k, sup: api.KeyCaller(k)}, nil
}

// ownerCaller is the caller an envd request acts for: the key that owns
// the sandbox (the request proved its right with the sandbox's token).
func (h *Handler) ownerCaller(info supervisor.Info) (*caller, error) {
	k, err := h.st.GetKey(info.Owner)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, errorf(http.StatusUnauthorized, "the key that owns sandbox %s was revoked", info.ID)
	}
	if err != nil {
		return nil, err
	}
	return &caller{key: k, sup: api.KeyCaller(k)}, nil
}
