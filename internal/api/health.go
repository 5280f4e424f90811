package api

import (
	_ "embed"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return append([]byte(nil), openapiDoc...) }

// Health is the body of GET /healthz: status "ok" (200), or "degraded"
// (503) when the audit log cannot record actions, which are all refused
// meanwhile.
type Health struct {
	Status string `json:"status"`
	// Audit is "ok", "none" (no audit log), or "failed: ..." (the daemon's
	// log has the details).
	Audit     string   `json:"audit"`
	Sandboxes int      `json:"sandboxes"`
	Pools     []Pool   `json:"pools,omitempty"`
	Templates []string `json:"templates"`
}

// Pool is a warm pool's state.
type Pool struct {
	Template string `json:"template"`
	Size     int    `json:"size"`
	Ready    int    `json:"ready"`
	Filling  int    `json:"filling"`
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, _ *caller) error {
	h := Health{Status: "ok", Audit: "none", Sandboxes: len(s.sup.LiveIDs()), Templates: []string{}}
	status := http.StatusOK
	if l := s.sup.AuditLog(); l != nil {
		h.Audit = "ok"
		if l.Err() != nil {
			// The error names host paths; /healthz needs no key.
			h.Status, h.Audit = "degraded", "failed: the audit log cannot be written, so every action is refused until the daemon is restarted; its log has the details"
			status = http.StatusServiceUnavailable
		}
	}
	for _, p := range s.sup.Pools() {
		h.Pools = append(h.Pools, Pool{Template: p.Template, Size: p.Size, Ready: p.Ready, Filling: p.Filling})
	}
	for _, t := range s.sup.Templates() {
		h.Templates = append(h.Templates, t.Name)
	}
	writeJSON(w, status, h)
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ *caller) error {
	promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ *caller) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
	return nil
}
