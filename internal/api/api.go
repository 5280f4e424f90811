// Package api is the daemon's HTTP/JSON API, versioned under /v1. Each
// resource has its own file; the routes table below lists every route and
// internal/api/openapi.json documents each of them (a test keeps the two in
// step).
//
// Every request passes the Host/Origin check (DNS-rebinding protection)
// first; every route but /healthz, /metrics and /v1/openapi.json needs
// `Authorization: Bearer <key>`. Errors are JSON:
//
//	{"error": {"code": "not_found", "message": "sandbox sb-1 does not exist"}}
//
// with a stable code and a message that never names a host path.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/internal/objstore"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Options configure a Server.
type Options struct {
	// Supervisor runs the sandboxes. Required.
	Supervisor *supervisor.Supervisor
	// Store holds the API keys. Required.
	Store *store.Store
	// ListenAddr is the address the server listens on ("127.0.0.1:7070");
	// its host is accepted in Host headers.
	ListenAddr string
	// AllowedHosts are further Host names accepted (besides localhost,
	// 127.0.0.1 and ::1).
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("https://app.example") whose
	// requests are accepted. None by default: requests that carry any
	// Origin header are refused.
	AllowedOrigins []string
	// Gatherer serves /metrics. Nil means prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Logger receives request errors. Nil discards them.
	Logger *slog.Logger
	// Archive bounds tar uploads. Zero fields mean DefaultArchiveLimits.
	Archive ArchiveLimits
	// Keepalive is how long a stream of events (a streaming exec, a
	// followed process) may stay silent before a keepalive event goes
	// out. Zero means DefaultKeepalive.
	Keepalive time.Duration
}

// DefaultKeepalive is Options.Keepalive's default.
const DefaultKeepalive = 15 * time.Second

// Server is the HTTP API.
type Server struct {
	opts    Options
	sup     *supervisor.Supervisor
	store   *store.Store
	log     *slog.Logger
	mux     *http.ServeMux
	hosts   map[string]bool
	anyIP   bool
	origins map[string]bool

	mcph     mcpHandler     // /mcp, made on first use (mcp.go)
	ui       uiState        // the console's sessions (ui.go)
	uimux    *http.ServeMux // the console's JSON routes (console.go)
	verifier auditVerifier  // GET /v1/audit/verify (audit.go)
}

// route is one entry of the routes table.
type route struct {
	method, path string
	// public routes need no key.
	public bool
	// operator routes need an operator key.
	operator bool
	// op, when set, is what the key's rate limit and in-flight cap count
	// this route as; it is admitted before its body is read.
	op *supervisor.Op
	// h handles the request; a returned error becomes the JSON error.
	h func(s *Server, w http.ResponseWriter, r *http.Request, c *caller) error
}

var (
	opCreate  = ptr(supervisor.OpCreate)
	opExec    = ptr(supervisor.OpExec)
	opFiles   = ptr(supervisor.OpFiles)
	opRequest = ptr(supervisor.OpRequest)
)

func ptr[T any](v T) *T { return &v }

// routes lists every route of the API; openapi.json documents each.
var routes = []route{
	{method: "GET", path: "/healthz", public: true, h: (*Server).health},
	{method: "GET", path: "/metrics", public: true, h: (*Server).metrics},
	{method: "GET", path: "/v1/openapi.json", public: true, h: (*Server).openapi},

	{method: "POST", path: "/v1/sandboxes", op: opCreate, h: (*Server).createSandbox},
	{method: "GET", path: "/v1/sandboxes", h: (*Server).listSandboxes},
	{method: "GET", path: "/v1/sandboxes/{id}", h: (*Server).getSandbox},
	{method: "DELETE", path: "/v1/sandboxes/{id}", h: (*Server).deleteSandbox},
	{method: "POST", path: "/v1/sandboxes/{id}/timeout", h: (*Server).extendTimeout},
	{method: "POST", path: "/v1/sandboxes/{id}/pause", op: opRequest, h: (*Server).pauseSandbox},
	{method: "POST", path: "/v1/sandboxes/{id}/fork", op: opCreate, h: (*Server).forkSandbox},
	{method: "POST", path: "/v1/sandboxes/{id}/resume", op: opRequest, h: (*Server).resumeSandbox},
	{method: "GET", path: "/v1/sandboxes/{id}/egress", h: (*Server).egressSummary},
	{method: "GET", path: "/v1/sandboxes/{id}/usage", h: (*Server).sandboxUsage},

	{method: "POST", path: "/v1/sandboxes/{id}/exec", op: opExec, h: (*Server).exec},

	{method: "POST", path: "/v1/sandboxes/{id}/processes", op: opExec, h: (*Server).startProcess},
	{method: "GET", path: "/v1/sandboxes/{id}/processes", h: (*Server).listProcesses},
	{method: "POST", path: "/v1/sandboxes/{id}/processes/{pid}/stdin", op: opExec, h: (*Server).processStdin},
	{method: "POST", path: "/v1/sandboxes/{id}/processes/{pid}/signal", h: (*Server).processSignal},
	{method: "GET", path: "/v1/sandboxes/{id}/processes/{pid}/wait", op: opExec, h: (*Server).processWait},
	{method: "GET", path: "/v1/sandboxes/{id}/processes/{pid}/output", op: opExec, h: (*Server).processOutput},
	{method: "POST", path: "/v1/sandboxes/{id}/processes/{pid}/resize", op: opExec, h: (*Server).processResize},
	{method: "GET", path: "/v1/sandboxes/{id}/execs/{pid}", op: opExec, h: (*Server).execResult},

	{method: "GET", path: "/v1/sandboxes/{id}/files", op: opFiles, h: (*Server).readFile},
	{method: "PUT", path: "/v1/sandboxes/{id}/files", op: opFiles, h: (*Server).writeFile},
	{method: "DELETE", path: "/v1/sandboxes/{id}/files", op: opFiles, h: (*Server).removeFile},
	{method: "GET", path: "/v1/sandboxes/{id}/files/list", op: opFiles, h: (*Server).listFiles},
	{method: "GET", path: "/v1/sandboxes/{id}/files/stat", op: opFiles, h: (*Server).statFile},
	{method: "POST", path: "/v1/sandboxes/{id}/files/mkdir", op: opFiles, h: (*Server).mkdir},
	{method: "POST", path: "/v1/sandboxes/{id}/files/move", op: opFiles, h: (*Server).moveFile},
	{method: "GET", path: "/v1/sandboxes/{id}/archive", op: opFiles, h: (*Server).downloadArchive},
	{method: "PUT", path: "/v1/sandboxes/{id}/archive", op: opFiles, h: (*Server).uploadArchive},

	{method: "POST", path: "/v1/sandboxes/{id}/snapshots", op: opFiles, h: (*Server).takeSnapshot},
	{method: "GET", path: "/v1/sandboxes/{id}/snapshots", h: (*Server).listSandboxSnapshots},
	{method: "GET", path: "/v1/sandboxes/{id}/snapshots/{snap}", h: (*Server).getSnapshot},
	{method: "DELETE", path: "/v1/sandboxes/{id}/snapshots/{snap}", h: (*Server).deleteSnapshot},
	{method: "POST", path: "/v1/sandboxes/{id}/snapshots/{snap}/fork", op: opCreate, h: (*Server).forkSnapshot},
	{method: "POST", path: "/v1/sandboxes/{id}/restore", op: opFiles, h: (*Server).restoreSandbox},
	{method: "GET", path: "/v1/sandboxes/{id}/diff", op: opFiles, h: (*Server).diffSandbox},
	{method: "GET", path: "/v1/snapshots", h: (*Server).listSnapshots},
	{method: "GET", path: "/v1/snapshots/{snap}", h: (*Server).getSnapshot},
	{method: "DELETE", path: "/v1/snapshots/{snap}", h: (*Server).deleteSnapshot},
	{method: "POST", path: "/v1/snapshots/{snap}/fork", op: opCreate, h: (*Server).forkSnapshot},

	{method: "POST", path: "/v1/sandboxes/{id}/export", op: opFiles, h: (*Server).exportFiles},

	{method: "GET", path: "/v1/sandboxes/{id}/changes", op: opFiles, h: (*Server).listChanges},
	{method: "POST", path: "/v1/sandboxes/{id}/changes/apply", op: opFiles, h: (*Server).applyChanges},
	{method: "POST", path: "/v1/sandboxes/{id}/changes/discard", op: opFiles, h: (*Server).discardChanges},
	{method: "GET", path: "/v1/changes", operator: true, h: (*Server).pendingChanges},

	{method: "POST", path: "/v1/keys", operator: true, h: (*Server).createKey},
	{method: "GET", path: "/v1/keys", operator: true, h: (*Server).listKeys},
	{method: "DELETE", path: "/v1/keys/{id}", operator: true, h: (*Server).deleteKey},

	{method: "GET", path: "/v1/approvals", operator: true, h: (*Server).listApprovals},
	{method: "POST", path: "/v1/approvals/{id}", operator: true, h: (*Server).decideApproval},
	{method: "GET", path: "/v1/audit", operator: true, h: (*Server).recentAudit},
	{method: "GET", path: "/v1/audit/verify", operator: true, h: (*Server).verifyAudit},

	{method: "POST", path: "/mcp", op: opRequest, h: (*Server).mcp}, {method: "GET", path: "/mcp", h: (*Server).mcp}, {method: "DELETE", path: "/mcp", h: (*Server).mcp},
}

// New makes the API server.
func New(opts Options) (*Server, error) {
	if opts.Supervisor == nil || opts.Store == nil {
		return nil, errors.New("api: a supervisor and a store are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	opts.Archive = opts.Archive.withDefaults()
	s := &Server{
		opts: opts, sup: opts.Supervisor, store: opts.Store, log: opts.Logger,
		mux:     http.NewServeMux(),
		hosts:   map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true},
		origins: map[string]bool{},
	}
	if opts.ListenAddr != "" {
		host, _, err := net.SplitHostPort(opts.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", opts.ListenAddr, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			// Listening on every address: clients reach it by any of the
			// host's IPs. Names still need allowed_hosts.
			s.anyIP = true
		} else {
			s.hosts[strings.ToLower(host)] = true
		}
	}
	for _, h := range opts.AllowedHosts {
		s.hosts[strings.ToLower(h)] = true
	}
	for _, o := range opts.AllowedOrigins {
		s.origins[o] = true
	}
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
	}
	s.uimux = s.consoleMux()
	return s, nil
}

// ServeHTTP checks Host and Origin, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isUIPath(r.URL.Path) {
		s.serveUI(w, r) // the approvals web page (ui.go) checks Host and Origin itself
		return
	}
	if err := s.checkHost(r); err != nil {
		writeError(w, s.log, r, err)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		// The mux would answer in plain text; answer in JSON.
		var allow []string
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := s.mux.Handler(probe); p != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, s.log, r, &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not allowed here; use " + strings.Join(allow, ", ")})
			return
		}
		writeError(w, s.log, r, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such route: " + r.Method + " " + truncate(r.URL.Path, 200)})
		return
	}
	s.mux.ServeHTTP(w, r)
}

// CheckHost refuses requests a web page could have made the browser send
// to this daemon (DNS rebinding, cross-site requests): handlers that share
// the daemon's listener (the E2B endpoints) call it first, as the API's
// own routes do.
func (s *Server) CheckHost(r *http.Request) error { return s.checkHost(r) }

// checkHost refuses requests a web page could have made the browser send
// to this daemon (DNS rebinding, cross-site requests).
func (s *Server) checkHost(r *http.Request) error {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	ok := s.hosts[host] || (s.anyIP && net.ParseIP(host) != nil)
	if !ok {
		return &Error{Status: http.StatusForbidden, Code: "host_not_allowed", Message: fmt.Sprintf("Host %q is not one this daemon answers to; add it to allowed_hosts in the config", truncate(host, 100))}
	}
	if o, set := r.Header["Origin"]; set && (len(o) != 1 || !s.origins[o[0]]) {
		return &Error{Status: http.StatusForbidden, Code: "origin_not_allowed", Message: "requests from web pages are refused; add the origin to allowed_origins in the config"}
	}
	return nil
}

// caller is the authenticated key of a request.
type caller struct {
	key store.Key
	sup supervisor.Caller
}

func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c *caller
		if !rt.public {
			var err error
			if c, err = s.authenticate(r); err != nil {
				writeError(w, s.log, r, err)
				return
			}
			if rt.operator && c.key.Role != store.RoleOperator {
				writeError(w, s.log, r, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this needs an operator key; this key's role is " + string(c.key.Role)})
				return
			}
		}
		if rt.op != nil {
			ctx, done, err := s.sup.Begin(r.Context(), c.sup, *rt.op)
			if err != nil {
				writeError(w, s.log, r, err)
				return
			}
			defer done()
			r = r.WithContext(ctx)
			if *rt.op == supervisor.OpRequest {
				// /mcp: the slot bounds reading the body; the tool calls
				// it carries take slots of their own (they run on the MCP
				// session's context, not this request's).
				r.Body = &releaseAtEOF{ReadCloser: r.Body, done: done}
			}
		}
		if err := rt.h(s, w, r, c); err != nil {
			writeError(w, s.log, r, err)
		}
	})
}

func (s *Server) authenticate(r *http.Request) (*caller, error) {
	unauth := func(msg string) error {
		return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: msg}
	}
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if h == "" {
		return nil, unauth("no API key: send Authorization: Bearer <key> (make one with `airlock keys create`)")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, unauth("malformed Authorization header: send Authorization: Bearer <key>")
	}
	k, err := s.store.KeyBySecret(strings.TrimSpace(secret))
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, unauth("unknown or revoked API key")
	}
	if err != nil {
		return nil, err
	}
	return &caller{key: k, sup: KeyCaller(k)}, nil
}

// KeyCaller is the supervisor's caller for key k: its id, role, quotas,
// rate limits, lineage and labels.
func KeyCaller(k store.Key) supervisor.Caller {
	return supervisor.Caller{KeyID: k.ID, Operator: k.Role == store.RoleOperator, Quota: k.Quota, Rate: k.Rate, Lineage: k.Lineage, Labels: k.Labels}
}

// releaseAtEOF calls done once the body has been read to its end or
// closed.
type releaseAtEOF struct {
	io.ReadCloser
	done func()
}

func (b *releaseAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *releaseAtEOF) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// Error is an error with its HTTP status and stable code.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter sets the Retry-After header (rounded up to seconds).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Classify turns an error of the supervisor, the store or a driver into an
// API error: its status, stable code and message. A server-side failure
// has code "internal" and an empty message: its error may name host paths,
// so it goes to the log only.
func Classify(err error) *Error { return classify(err) }

// classify turns an error of the supervisor, the store or a driver into an
// API error. Messages of server-side failures are replaced by a generic one
// (they may name host paths); the real error goes to the log.
func classify(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var le *sandbox.LayerError
	var re *supervisor.RateError
	m := err.Error()
	switch {
	case errors.As(err, &re):
		return &Error{http.StatusTooManyRequests, "rate_limited", re.Msg, re.RetryAfter}
	case errors.As(err, &le):
		return &Error{http.StatusNotImplemented, "unsupported", le.Error(), 0}
	case errors.As(err, new(*supervisor.ApprovalRequiredError)):
		return &Error{http.StatusForbidden, "approval_required", m, 0}
	case errors.As(err, new(*policy.Denied)):
		return &Error{http.StatusForbidden, "denied", m, 0}
	case errors.Is(err, supervisor.ErrAudit):
		return &Error{http.StatusServiceUnavailable, "audit_unavailable", "the audit log cannot record actions; the daemon's log has the details", 0}
	case errors.Is(err, supervisor.ErrTypeRefused):
		return &Error{http.StatusUnsupportedMediaType, "type_refused", m, 0}
	case errors.Is(err, objstore.ErrTooLarge):
		return &Error{http.StatusRequestEntityTooLarge, "too_large", m, 0}
	case errors.Is(err, objstore.ErrUnavailable):
		return &Error{http.StatusBadGateway, "store_unavailable", m, 0}
	case errors.Is(err, objstore.ErrDenied):
		return &Error{http.StatusBadGateway, "store_denied", m, 0}
	case errors.Is(err, supervisor.ErrForbidden):
		return &Error{http.StatusForbidden, "forbidden", m, 0}
	case errors.Is(err, supervisor.ErrQuota):
		return &Error{http.StatusTooManyRequests, "quota_exceeded", m, 0}
	case errors.Is(err, supervisor.ErrCapacity):
		return &Error{http.StatusServiceUnavailable, "insufficient_capacity", m, 0}
	case errors.Is(err, supervisor.ErrNotRunning), errors.Is(err, sandbox.ErrClosed), errors.Is(err, sandbox.ErrDetached):
		return &Error{http.StatusConflict, "not_running", m, 0}
	case errors.Is(err, sandbox.ErrMismatch):
		return &Error{http.StatusConflict, "version_mismatch", m, 0}
	case errors.Is(err, supervisor.ErrPaused):
		return &Error{http.StatusConflict, "paused", m, 0}
	case errors.Is(err, supervisor.ErrBusy):
		return &Error{http.StatusConflict, "busy", m, 0}
	case errors.Is(err, sandbox.ErrNotFound):
		return &Error{http.StatusNotFound, "not_found", m, 0}
	case errors.Is(err, sandbox.ErrOutside):
		return &Error{http.StatusBadRequest, "path_outside", m, 0}
	case errors.Is(err, fs.ErrPermission):
		return &Error{http.StatusForbidden, "permission_denied", m, 0}
	case errors.Is(err, sandbox.ErrExists):
		return &Error{http.StatusConflict, "exists", m, 0}
	case errors.Is(err, sandbox.ErrInvalid):
		return &Error{http.StatusBadRequest, "invalid", m, 0}
	case errors.Is(err, sandbox.ErrLimit):
		return &Error{http.StatusInsufficientStorage, "limit", m, 0}
	case errors.Is(err, sandbox.ErrUnsupported):
		return &Error{http.StatusNotImplemented, "unsupported", m, 0}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit), 0}
	}
	return &Error{http.StatusInternalServerError, "internal", "", 0}
}

func writeError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	e := classify(err)
	if e.Status >= 500 && e.Code == "internal" {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &Error{Status: e.Status, Code: e.Code, Message: "internal error; the daemon's log has the details"}
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	var b errorBody
	b.Error.Code, b.Error.Message = e.Code, truncate(e.Message, 2000)
	writeJSON(w, e.Status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxJSONBody bounds JSON request bodies (exec stdin and code included).
const maxJSONBody = 8 << 20

// decodeJSON reads a JSON body into v, refusing unknown fields and
// trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBody(http.MaxBytesReader(w, r.Body, maxJSONBody), v)
}

func decodeBody(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return badRequest("the request body is empty; send a JSON object")
		}
		return badRequest("malformed JSON body: %s", truncate(err.Error(), 200))
	}
	if dec.More() {
		return badRequest("malformed JSON body: data after the object")
	}
	return nil
}

func badRequest(format string, args ...any) error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid", Message: fmt.Sprintf(format, args...)}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// sandboxID reads and checks the {id} path value.
func sandboxID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sandbox.ValidID(id) {
		return "", &Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("sandbox %q does not exist", truncate(id, 80))}
	}
	return id, nil
}

// millis turns a millisecond count into a duration, refusing negatives and
// absurd values.
func millis(name string, ms int64) (time.Duration, error) {
	if ms < 0 || ms > int64(365*24*time.Hour/time.Millisecond) {
		return 0, badRequest("%s %d: give milliseconds between 0 and a year", name, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func seconds(name string, sec int64) (time.Duration, error) {
	if sec < 0 || sec > int64(365*24*time.Hour/time.Second) {
		return 0, badRequest("%s %d: give seconds between 0 and a year", name, sec)
	}
	return time.Duration(sec) * time.Second, nil
}

// envList turns {"K": "V"} into sorted "K=V" entries.
func envList(env map[string]string) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, badRequest("environment variable %q: names cannot be empty or hold '=' or NUL", truncate(k, 80))
		}
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}
