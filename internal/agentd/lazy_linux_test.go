package agentd

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// TestLazilyBuildsOnFirstRequest: a sandbox's agent builds a procedure's
// handler on its first request, once; a template's builds it at once.
func TestLazilyBuildsOnFirstRequest(t *testing.T) {
	built := 0
	build := func() http.Handler {
		built++
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	}
	s := &server{cfg: &agent.Config{}}
	h := s.lazily(build)
	if built != 0 {
		t.Fatalf("built %d times before a request, want 0", built)
	}
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, agent.ProcStat, nil))
		if rec.Code != http.StatusNoContent {
			t.Fatalf("status %d, want %d", rec.Code, http.StatusNoContent)
		}
	}
	if built != 1 {
		t.Fatalf("built %d times for 3 requests, want 1", built)
	}

	built = 0
	s = &server{cfg: &agent.Config{Template: true}}
	s.lazily(build)
	if built != 1 {
		t.Fatalf("a template's agent built %d times before a request, want 1", built)
	}
}
