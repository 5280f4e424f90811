package api

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The console's JSON routes, under /ui/api/: the same handlers as the API's
// where they fit (the caller is the session's operator key instead of a
// bearer key), and a few that gather what one page shows in one answer.
// ui.go checks the session, the Origin and the CSRF token first.

// uiCallerKey is the request context's key of the session's caller.
type uiCallerKey struct{}

var consoleRoutes = []struct {
	method, path string
	h            func(s *Server, w http.ResponseWriter, r *http.Request, c *caller) error
}{
	{"GET", "/ui/api/sandboxes", (*Server).consoleSandboxes},
	{"GET", "/ui/api/sandboxes/{id}", (*Server).consoleSandbox},
	{"POST", "/ui/api/sandboxes/{id}/kill", (*Server).deleteSandbox},
	{"POST", "/ui/api/sandboxes/{id}/timeout", (*Server).extendTimeout},
	{"POST", "/ui/api/sandboxes/{id}/pause", (*Server).pauseSandbox},
	{"POST", "/ui/api/sandboxes/{id}/resume", (*Server).resumeSandbox},
	{"GET", "/ui/api/sandboxes/{id}/processes", (*Server).listProcesses},
	{"GET", "/ui/api/sandboxes/{id}/files/list", (*Server).listFiles},
	{"GET", "/ui/api/sandboxes/{id}/files", (*Server).downloadFile},
	{"GET", "/ui/api/sandboxes/{id}/snapshots", (*Server).listSandboxSnapshots},
	{"GET", "/ui/api/sandboxes/{id}/diff", (*Server).diffSandbox},
	{"POST", "/ui/api/sandboxes/{id}/restore", (*Server).restoreSandbox},
	{"GET", "/ui/api/changes", (*Server).pendingChanges},
	{"GET", "/ui/api/sandboxes/{id}/changes", (*Server).listChanges},
	{"POST", "/ui/api/sandboxes/{id}/changes/apply", (*Server).applyChanges},
	{"POST", "/ui/api/sandboxes/{id}/changes/discard", (*Server).discardChanges},
	{"GET", "/ui/api/approvals", (*Server).listApprovals},
	{"POST", "/ui/api/approvals/{id}", (*Server).decideApproval},
	{"GET", "/ui/api/audit", (*Server).recentAudit},
	{"GET", "/ui/api/audit/verify", (*Server).verifyAudit},
	{"GET", "/ui/api/keys", (*Server).consoleKeys},
	{"POST", "/ui/api/keys", (*Server).createKey},
	{"POST", "/ui/api/keys/{id}/revoke", (*Server).deleteKey},
}

func (s *Server) consoleMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range consoleRoutes {
		mux.Handle(rt.method+" "+rt.path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := r.Context().Value(uiCallerKey{}).(*caller)
			if c == nil { // ui.go always sets it; refuse rather than act as nobody
				writeError(w, s.log, r, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "not logged in"})
				return
			}
			if err := rt.h(s, w, r, c); err != nil {
				writeError(w, s.log, r, err)
			}
		}))
	}
	return mux
}

// ConsoleSandbox is a sandbox as the console lists it: with what it uses
// now and how many execs it ran, when it is live.
type ConsoleSandbox struct {
	Sandbox
	Usage *SandboxUsage `json:"usage,omitempty"`
	// UsageError says why Usage is missing from a running sandbox.
	UsageError string `json:"usage_error,omitempty"`
	ExecCount  int64  `json:"exec_count"`
}

// consoleSandboxList is the answer of GET /ui/api/sandboxes.
type consoleSandboxList struct {
	// Now is the daemon's clock, to count ages and TTLs from.
	Now       time.Time        `json:"now"`
	Sandboxes []ConsoleSandbox `json:"sandboxes"`
	// Keys and Drivers are what the filters offer.
	Keys    []consoleKeyName `json:"keys"`
	Drivers []string         `json:"drivers"`
}

type consoleKeyName struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// consoleView adds what in uses now, when it runs.
func (s *Server) consoleView(r *http.Request, c *caller, in supervisor.Info) ConsoleSandbox {
	cs := ConsoleSandbox{Sandbox: wireSandbox(in), ExecCount: in.Execs}
	if in.State != store.StateRunning {
		return cs
	}
	u, err := s.sup.Usage(r.Context(), c.sup, in.ID)
	if err != nil {
		cs.UsageError = classify(err).Message
		if cs.UsageError == "" {
			cs.UsageError = "the daemon could not read it (its log has the details)"
			s.log.Warn("console: read usage", "sandbox_id", in.ID, "err", err)
		}
		return cs
	}
	wu := wireUsage(u)
	cs.Usage = &wu
	return cs
}

// consoleSandboxes answers GET /ui/api/sandboxes?key=&driver=&state=:
// state "live" (creating, pooled, running or paused), a state's name, or empty
// for every sandbox on record.
func (s *Server) consoleSandboxes(w http.ResponseWriter, r *http.Request, c *caller) error {
	q := r.URL.Query()
	f := supervisor.Filter{Owner: q.Get("key"), Driver: q.Get("driver")}
	state := q.Get("state")
	switch st := store.State(state); st {
	case "", "live":
	case store.StateCreating, store.StatePooled, store.StateRunning, store.StatePaused, store.StateDestroyed, store.StateLost:
		f.State = st
	default:
		return badRequest("state %q: use live, creating, pooled, running, paused, destroyed or lost", truncate(state, 40))
	}
	infos, err := s.sup.List(r.Context(), c.sup, f)
	if err != nil {
		return err
	}
	out := consoleSandboxList{Now: time.Now().UTC(), Sandboxes: []ConsoleSandbox{}, Drivers: s.sup.Drivers(), Keys: []consoleKeyName{}}
	for _, in := range infos {
		if state == "live" && !in.State.Live() {
			continue
		}
		out.Sandboxes = append(out.Sandboxes, s.consoleView(r, c, in))
	}
	keys, err := s.store.Keys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		out.Keys = append(out.Keys, consoleKeyName{ID: k.ID, Name: k.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// consoleSandboxDetail is the answer of GET /ui/api/sandboxes/{id}.
type consoleSandboxDetail struct {
	Now     time.Time      `json:"now"`
	Sandbox ConsoleSandbox `json:"sandbox"`
	// KeyName is the name of the key that owns it.
	KeyName string `json:"key_name,omitempty"`
	// Egress is what it did through the egress proxy while live; absent
	// without egress.
	Egress *egress.Summary `json:"egress,omitempty"`
}

func (s *Server) consoleSandbox(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	in, err := s.sup.Get(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	out := consoleSandboxDetail{Now: time.Now().UTC(), Sandbox: s.consoleView(r, c, in)}
	if k, err := s.store.GetKey(in.Owner); err == nil {
		out.KeyName = k.Name
	}
	if in.State == store.StateRunning {
		if sum, err := s.sup.Egress(r.Context(), c.sup, id); err == nil {
			out.Egress = &sum
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// downloadFile answers GET /ui/api/sandboxes/{id}/files?path=: the file's
// bytes as a download, never shown by the browser.
func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, c *caller) error {
	p := r.URL.Query().Get("path")
	h := w.Header()
	h.Set("Content-Disposition", attachment(path.Base(p)))
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	return s.readFile(w, r, c)
}

// attachment is a Content-Disposition that saves the file as name: an
// ASCII stand-in for old clients and the exact name percent-encoded
// (RFC 6266).
func attachment(name string) string {
	plain := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, name)
	if plain == "" || plain == "." || plain == ".." {
		plain = "file"
	}
	return `attachment; filename="` + plain + `"; filename*=UTF-8''` + url.PathEscape(name)
}

// ConsoleKey is a key as the console lists it, with what it holds now.
type ConsoleKey struct {
	Key
	// LiveSandboxes and MemoryBytes are what its live sandboxes hold
	// (quota.max_sandboxes and quota.max_memory_bytes bound them).
	LiveSandboxes int   `json:"live_sandboxes"`
	MemoryBytes   int64 `json:"memory_bytes"`
}

func (s *Server) consoleKeys(w http.ResponseWriter, r *http.Request, c *caller) error {
	ks, err := s.store.Keys()
	if err != nil {
		return err
	}
	use := s.sup.KeyUsage()
	out := struct {
		Keys []ConsoleKey `json:"keys"`
	}{Keys: make([]ConsoleKey, 0, len(ks))}
	for _, k := range ks {
		u := use[k.ID]
		out.Keys = append(out.Keys, ConsoleKey{Key: wireKey(k), LiveSandboxes: u.Sandboxes, MemoryBytes: u.MemoryBytes})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
