package agentd

import (
	"net/http"
	"sync"
)

// lazily returns a handler that builds the real one on its first request.
// A procedure's Connect handler holds about 3 KiB of objects (its three
// protocols, codecs and compressors) and an idle agent is asked for few
// of its procedures: what it never builds it does not hold
// (docs/decisions.md, 93). A template's agent builds them at once, before
// it waits, as it does the rest of what its calls need (see run).
func (s *server) lazily(build func() http.Handler) http.Handler {
	if s.cfg.Template {
		return build()
	}
	h := sync.OnceValue(build)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h().ServeHTTP(w, r) })
}
