package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file routes the requests for one sandbox (E2b-Sandbox-Id) and
// checks them against the sandbox's token: envd's routes (port 49983) and
// the code interpreter's (49999). A request without the sandbox's token is
// answered 401 whether the id is live, ended, pooled, another key's or
// unknown (and such requests are rate limited, 429); with the token, a
// sandbox that has ended answers 502 for every route, which the SDKs read
// as "the sandbox is gone" (isRunning is false).

// maxMessage bounds one Connect message each way.
const maxMessage = 8 << 20

// target is the sandbox a request is for, and whom it acts for.
type target struct {
	info supervisor.Info
	c    *caller
}

type targetKey struct{}

// targetOf returns the sandbox of a request that serveSandbox admitted.
func targetOf(ctx context.Context) *target {
	t, _ := ctx.Value(targetKey{}).(*target)
	return t
}

func (h *Handler) routeEnvd() {
	m := h.envd
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /files", h.withTarget(h.readFile))
	m.HandleFunc("POST /files", h.withTarget(h.writeFiles))
	opts := []connect.HandlerOption{connect.WithCodec(jsonCodec{}), connect.WithReadMaxBytes(maxMessage), connect.WithSendMaxBytes(maxMessage)}
	for path, hd := range map[string]http.Handler{
		"/process.Process/Start":      connect.NewServerStreamHandler("/process.Process/Start", h.start, opts...),
		"/process.Process/Connect":    connect.NewServerStreamHandler("/process.Process/Connect", h.connectProcess, opts...),
		"/process.Process/List":       connect.NewUnaryHandler("/process.Process/List", h.listProcesses, opts...),
		"/process.Process/SendInput":  connect.NewUnaryHandler("/process.Process/SendInput", h.sendInput, opts...),
		"/process.Process/SendSignal": connect.NewUnaryHandler("/process.Process/SendSignal", h.sendSignal, opts...),
		"/process.Process/CloseStdin": connect.NewUnaryHandler("/process.Process/CloseStdin", h.closeStdin, opts...),
		"/process.Process/Update":     connect.NewUnaryHandler("/process.Process/Update", h.update, opts...),

		"/filesystem.Filesystem/Stat":             connect.NewUnaryHandler("/filesystem.Filesystem/Stat", h.stat, opts...),
		"/filesystem.Filesystem/ListDir":          connect.NewUnaryHandler("/filesystem.Filesystem/ListDir", h.listDir, opts...),
		"/filesystem.Filesystem/MakeDir":          connect.NewUnaryHandler("/filesystem.Filesystem/MakeDir", h.makeDir, opts...),
		"/filesystem.Filesystem/Move":             connect.NewUnaryHandler("/filesystem.Filesystem/Move", h.move, opts...),
		"/filesystem.Filesystem/Remove":           connect.NewUnaryHandler("/filesystem.Filesystem/Remove", h.remove, opts...),
		"/filesystem.Filesystem/WatchDir":         h.capWatches(connect.NewServerStreamHandler("/filesystem.Filesystem/WatchDir", h.watchDir, opts...)),
		"/filesystem.Filesystem/CreateWatcher":    connect.NewUnaryHandler("/filesystem.Filesystem/CreateWatcher", h.createWatcher, opts...),
		"/filesystem.Filesystem/GetWatcherEvents": connect.NewUnaryHandler("/filesystem.Filesystem/GetWatcherEvents", h.watcherEvents, opts...),
		"/filesystem.Filesystem/RemoveWatcher":    connect.NewUnaryHandler("/filesystem.Filesystem/RemoveWatcher", h.removeWatcher, opts...),
	} {
		m.Handle(path, hd)
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, errorf(http.StatusNotFound, "envd has no route %s %s here", r.Method, truncate(r.URL.Path, 200)))
	})
}

// withTarget runs fn for an admitted request; an error it returns is
// written in E2B's shape.
func (h *Handler) withTarget(fn func(http.ResponseWriter, *http.Request, *target) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r, targetOf(r.Context())); err != nil {
			h.writeError(w, r, err)
		}
	}
}

// serveSandbox admits a request for sandbox id and routes it by port.
func (h *Handler) serveSandbox(w http.ResponseWriter, r *http.Request, id string) {
	var mux *http.ServeMux
	switch r.Header.Get("E2b-Sandbox-Port") {
	case "", envdPort:
		mux = h.envd
	case interpreterPort:
		mux = h.interp
	default:
		// Another port: the sandbox's server on it (ports.go).
		port, err := strconv.Atoi(r.Header.Get("E2b-Sandbox-Port"))
		if err != nil || port < 1 || port > 65535 {
			h.writeError(w, r, errorf(http.StatusBadRequest, "E2b-Sandbox-Port %q: give a port, 1 to 65535", truncate(r.Header.Get("E2b-Sandbox-Port"), 10)))
			return
		}
		h.servePort(w, r, id, port)
		return
	}
	// The token is checked first: an id that is unknown, ended, pooled or
	// another's, without its sandbox's token, gets the one answer a live
	// sandbox with a wrong token gets, so that a request without the token
	// learns nothing of which ids exist and what became of them; and such
	// requests are rate limited, by address and in all (security review 2,
	// N8). Only a caller holding the token learns that its sandbox ended.
	// An id this daemon does not hold is looked for in the shared bucket
	// (paused on another daemon) only within the same rate limit, taken
	// once per request.
	var info supervisor.Info
	err := sandbox.ErrNotFound
	counted := h.strangersGate(r)
	if sandbox.ValidID(id) {
		info, err = h.sup.SandboxGated(r.Context(), id, counted.allow)
	}
	switch {
	case err != nil && !errors.Is(err, sandbox.ErrNotFound):
		h.writeError(w, r, err)
		return
	case err != nil || !h.authorized(r, info, mux == h.interp):
		if !counted.allow() {
			w.Header().Set("Retry-After", "1")
			h.writeError(w, r, errorf(http.StatusTooManyRequests, "too many requests without a sandbox's access token; retry later"))
			return
		}
		h.writeError(w, r, errorf(http.StatusUnauthorized, "no running sandbox has this id and this access token: send the envdAccessToken that its create or connect answered (the SDKs do)"))
		return
	case info.State == store.StatePaused && info.Lifecycle != nil && info.Lifecycle.AutoResume:
		// Made with autoResume: the request resumes it (lifecycle.go).
		if info, err = h.woken(r.Context(), info); err != nil {
			h.writeError(w, r, err)
			return
		}
	case info.State != store.StateRunning:
		h.writeError(w, r, errorf(http.StatusBadGateway, "sandbox %q is not running: %s (%s)", id, info.State, info.EndReason))
		return
	}
	c, err := h.ownerCaller(info)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ctx := context.WithValue(r.Context(), targetKey{}, &target{info: info, c: c})
	mux.ServeHTTP(w, r.WithContext(ctx))
}

// authorized checks the request's proof: the sandbox's token in
// X-Access-Token; for the code interpreter also in
// E2B-Traffic-Access-Token (its context calls send only that); for /files
// a signature made with the token (the SDKs' uploadUrl and downloadUrl).
func (h *Handler) authorized(r *http.Request, info supervisor.Info, interp bool) bool {
	if supervisor.TokenMatches(info, r.Header.Get("X-Access-Token")) {
		return true
	}
	if tok := r.Header.Get("E2b-Traffic-Access-Token"); interp && (trafficMatches(info, tok) || supervisor.TokenMatches(info, tok)) {
		return true
	}
	q := r.URL.Query()
	if interp || r.URL.Path != "/files" || q.Get("signature") == "" || info.Token == "" {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + info.Token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(want), []byte(q.Get("signature"))) == 1
}

// rpcError turns an error into a Connect error with the code the SDKs map
// to their error classes (not_found: FileNotFoundError or false;
// already_exists: makeDir's false; invalid_argument; resource_exhausted:
// RateLimitError; unavailable: the sandbox is gone).
func (h *Handler) rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	var he *httpError
	if errors.As(err, &he) {
		code := connect.CodeInvalidArgument
		switch he.status {
		case http.StatusNotFound:
			code = connect.CodeNotFound
		case http.StatusConflict:
			code = connect.CodeAlreadyExists
		case http.StatusUnauthorized:
			code = connect.CodeUnauthenticated
		case http.StatusForbidden:
			code = connect.CodePermissionDenied
		case http.StatusTooManyRequests, http.StatusInsufficientStorage, http.StatusRequestEntityTooLarge:
			code = connect.CodeResourceExhausted
		case http.StatusBadGateway, http.StatusServiceUnavailable:
			code = connect.CodeUnavailable
		case http.StatusNotImplemented:
			code = connect.CodeUnimplemented
		}
		return connect.NewError(code, errors.New(he.msg))
	}
	e := api.Classify(err)
	var code connect.Code
	switch e.Code {
	case "not_found", "not_running", "forbidden":
		code = connect.CodeNotFound
	case "paused", "busy":
		// Sandbox.connect resumes a paused sandbox.
		code = connect.CodeFailedPrecondition
	case "invalid", "path_outside", "is_directory":
		code = connect.CodeInvalidArgument
	case "exists":
		code = connect.CodeAlreadyExists
	case "permission_denied", "denied":
		code = connect.CodePermissionDenied
	case "rate_limited", "quota_exceeded", "limit", "too_large":
		code = connect.CodeResourceExhausted
	case "unsupported":
		code = connect.CodeUnimplemented
	case "audit_unavailable", "insufficient_capacity":
		code = connect.CodeUnavailable
	default:
		h.log.Error("e2b call failed", "err", err)
		return connect.NewError(connect.CodeInternal, errors.New("internal error; the daemon's log has the details"))
	}
	return connect.NewError(code, errors.New(e.Message))
}

// Bounds of the requests that show no right to a sandbox: per address (a
// client's IP) and in all. Requests with the token are never counted.
const (
	strangerRate     = 10 // per second, per address
	strangerBurst    = 50
	strangerAllRate  = 100 // per second, in all
	strangerAllBurst = 500
	// maxStrangerAddrs bounds the addresses remembered; past it they are
	// forgotten at once (the limit in all still holds).
	maxStrangerAddrs = 4096
)

// strangerGate takes one request from the strangers' allowance at most
// once, when first asked.
type strangerGate struct {
	h       *Handler
	addr    string
	asked   bool
	allowed bool
}

func (h *Handler) strangersGate(r *http.Request) *strangerGate {
	return &strangerGate{h: h, addr: r.RemoteAddr}
}

// allow is strangers.allow for the request, taken once.
func (g *strangerGate) allow() bool {
	if !g.asked {
		g.asked, g.allowed = true, g.h.strangers.allow(g.addr)
	}
	return g.allowed
}

// strangers rate-limits requests for a sandbox without its token.
type strangers struct {
	mu  sync.Mutex
	all *rate.Limiter
	by  map[string]*rate.Limiter
}

func (s *strangers) init() {
	s.all = rate.NewLimiter(strangerAllRate, strangerAllBurst)
	s.by = map[string]*rate.Limiter{}
}

// allow takes one request from addr's allowance and the one in all.
func (s *strangers) allow(addr string) bool {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.by[addr]
	if !ok {
		if len(s.by) >= maxStrangerAddrs {
			clear(s.by)
		}
		l = rate.NewLimiter(strangerRate, strangerBurst)
		s.by[addr] = l
	}
	return l.Allow() && s.all.Allow()
}
