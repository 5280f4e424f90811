package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// The operator console, served under /ui: an operator logs in with an
// operator key and sees every sandbox (with what it uses now), one
// sandbox's exec history, egress decisions and files, the approvals, the
// audit log with its verification status, and the keys; and can kill and
// extend, pause and resume sandboxes, decide approvals, and make and revoke keys. The page is
// static files (ui/: HTML, one stylesheet, a few ES modules without a
// framework) that call the JSON routes of console.go.
//
// Defences: the page's script renders everything with textContent (code is
// shown, never run) and shows every control, bidi and zero-width character
// as a visible escape; a strict Content-Security-Policy allows only the
// page's own script and style; the session cookie is HttpOnly and
// SameSite=Strict; every POST needs an Origin of the page itself and
// (after login) the session's CSRF token in X-CSRF-Token; the Host check
// of the API applies. The key is kept by the daemon, never by the page.

//go:embed ui
var uiFiles embed.FS

const (
	uiCookie     = "airlock_ui"
	uiSessionTTL = 8 * time.Hour
	uiMaxSession = 1000
	uiCSP        = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

type uiSession struct {
	secret  string // the operator key, re-checked on every request
	keyID   string
	csrf    string
	expires time.Time
}

// uiState is the web page's sessions, a field of the Server.
type uiState struct {
	mu       sync.Mutex
	sessions map[string]*uiSession // made on the first login
}

func (s *Server) uiState() *uiState { return &s.ui }

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// isUIPath says the request is for the web page.
func isUIPath(p string) bool { return p == "/ui" || strings.HasPrefix(p, "/ui/") }

// serveUI serves the web page and its JSON endpoints.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if err := s.checkUIOrigin(r); err != nil {
		writeError(w, s.log, r, err)
		return
	}
	if err := s.routeUI(w, r); err != nil {
		writeError(w, s.log, r, err)
	}
}

// checkUIOrigin applies the API's Host check, and accepts an Origin only
// when it is the page's own (or an allowed one). A POST must carry one.
func (s *Server) checkUIOrigin(r *http.Request) error {
	bare := r.Clone(r.Context())
	bare.Header.Del("Origin")
	if err := s.checkHost(bare); err != nil {
		return err
	}
	forbidden := &Error{Status: http.StatusForbidden, Code: "origin_not_allowed", Message: "this request must come from the airlock page itself"}
	o, set := r.Header["Origin"]
	if !set {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return forbidden
		}
		return nil
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if len(o) != 1 || (o[0] != scheme+"://"+r.Host && !s.origins[o[0]]) {
		return forbidden
	}
	return nil
}

// uiAssets maps the page's files to their content types.
var uiAssets = map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

func (s *Server) routeUI(w http.ResponseWriter, r *http.Request) error {
	p, m := r.URL.Path, r.Method
	switch {
	case m == "GET" && (p == "/ui" || p == "/ui/"):
		return serveAsset(w, "index.html")
	case m == "GET" && uiAssets[path.Ext(p)] != "" && strings.Count(p, "/") == 2:
		return serveAsset(w, strings.TrimPrefix(p, "/ui/"))
	case m == "POST" && p == "/ui/login":
		return s.uiLogin(w, r)
	}
	sess, c, err := s.uiCaller(r)
	if err != nil {
		return err
	}
	if m != "GET" {
		got := r.Header.Get("X-CSRF-Token")
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			return &Error{Status: http.StatusForbidden, Code: "csrf", Message: "missing or wrong CSRF token: reload the page"}
		}
	}
	switch {
	case m == "GET" && p == "/ui/session":
		writeJSON(w, http.StatusOK, map[string]string{"key": sess.keyID, "csrf": sess.csrf})
		return nil
	case m == "POST" && p == "/ui/logout":
		st := s.uiState()
		st.mu.Lock()
		for id, x := range st.sessions {
			if x == sess {
				delete(st.sessions, id)
			}
		}
		st.mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode}) //nolint:gosec // Secure only over TLS; the daemon's page is often plain HTTP on loopback
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if _, pattern := s.uimux.Handler(r); pattern == "" {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such page: " + m + " " + truncate(p, 100)}
	}
	s.uimux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), uiCallerKey{}, c)))
	return nil
}

// serveAsset serves one of the page's files; names not in ui/ are 404.
func serveAsset(w http.ResponseWriter, name string) error {
	ctype, ok := uiAssets[path.Ext(name)]
	b, err := uiFiles.ReadFile("ui/" + name)
	if !ok || err != nil || !fs.ValidPath(name) {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such file: " + truncate(name, 100)}
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(b)
	return nil
}

// uiLogin checks an operator key and starts a session.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Key string `json:"key"`
	}
	if err := decodeJSON(w, r, &b); err != nil {
		return err
	}
	k, err := s.store.KeyBySecret(strings.TrimSpace(b.Key))
	if errors.Is(err, sandbox.ErrNotFound) {
		return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "unknown or revoked API key"}
	}
	if err != nil {
		return err
	}
	if k.Role != store.RoleOperator {
		return &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this page needs an operator key; this key's role is " + string(k.Role)}
	}
	id := randomToken()
	sess := &uiSession{secret: strings.TrimSpace(b.Key), keyID: k.ID, csrf: randomToken(), expires: time.Now().Add(uiSessionTTL)}
	st := s.uiState()
	st.mu.Lock()
	now := time.Now()
	for sid, x := range st.sessions {
		if now.After(x.expires) {
			delete(st.sessions, sid)
		}
	}
	if len(st.sessions) >= uiMaxSession {
		st.mu.Unlock()
		return &Error{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "too many open sessions; log out elsewhere or wait"}
	}
	if st.sessions == nil {
		st.sessions = map[string]*uiSession{}
	}
	st.sessions[id] = sess
	st.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: id, Path: "/ui", HttpOnly: true, Secure: r.TLS != nil, //nolint:gosec // Secure over TLS; plain HTTP on loopback has no TLS
		SameSite: http.SameSiteStrictMode, MaxAge: int(uiSessionTTL / time.Second)})
	writeJSON(w, http.StatusOK, map[string]string{"key": k.ID, "csrf": sess.csrf})
	return nil
}

// uiCaller finds the session of r and re-checks its key.
func (s *Server) uiCaller(r *http.Request) (*uiSession, *caller, error) {
	unauth := &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "not logged in"}
	ck, err := r.Cookie(uiCookie)
	if err != nil {
		return nil, nil, unauth
	}
	st := s.uiState()
	st.mu.Lock()
	sess := st.sessions[ck.Value]
	if sess != nil && time.Now().After(sess.expires) {
		delete(st.sessions, ck.Value)
		sess = nil
	}
	st.mu.Unlock()
	if sess == nil {
		return nil, nil, unauth
	}
	rr := r.Clone(r.Context())
	rr.Header.Set("Authorization", "Bearer "+sess.secret)
	c, err := s.authenticate(rr)
	if err != nil {
		return nil, nil, err
	}
	if c.key.Role != store.RoleOperator {
		return nil, nil, &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this key is no longer an operator key"}
	}
	return sess, c, nil
}
