package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec: argv, or code
// and language ("python", "bash" or "sh").
type ExecRequest struct {
	Argv     []string          `json:"argv,omitempty"`
	Code     string            `json:"code,omitempty"`
	Language string            `json:"language,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	// Stdin is the command's whole standard input, base64.
	Stdin     string `json:"stdin,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

func (b ExecRequest) request() (supervisor.ExecRequest, error) {
	var req supervisor.ExecRequest
	var err error
	if len(b.Argv) > 4096 {
		return req, badRequest("at most 4096 arguments")
	}
	req.Argv, req.Code, req.Language, req.Dir = b.Argv, b.Code, b.Language, b.Cwd
	if req.Env, err = envList(b.Env); err != nil {
		return req, err
	}
	if b.Stdin != "" {
		if req.Stdin, err = base64.StdEncoding.DecodeString(b.Stdin); err != nil {
			return req, badRequest("stdin: give standard base64")
		}
	}
	if req.Timeout, err = millis("timeout_ms", b.TimeoutMS); err != nil {
		return req, err
	}
	if len(req.Argv) == 0 && req.Code == "" && req.Language == "" {
		return req, badRequest("no command given: set argv, or code and language")
	}
	return req, nil
}

// ExecResponse is the answer of a non-streaming exec. Output that is not
// valid UTF-8 comes in the _base64 field instead.
type ExecResponse struct {
	Stdout       string         `json:"stdout"`
	Stderr       string         `json:"stderr"`
	StdoutBase64 string         `json:"stdout_base64,omitempty"`
	StderrBase64 string         `json:"stderr_base64,omitempty"`
	Result       sandbox.Result `json:"result"`
}

// Event is one line of a streaming exec: output (type stdout or stderr,
// with data, or data_base64 when the chunk is not valid UTF-8), the result
// (type result, last), or an error (type error, last).
type Event struct {
	Type       string          `json:"type"`
	Data       string          `json:"data,omitempty"`
	DataBase64 string          `json:"data_base64,omitempty"`
	Result     *sandbox.Result `json:"result,omitempty"`
	Error      *errorDetail    `json:"error,omitempty"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// text returns b as a string when it is valid UTF-8, else as base64.
func text(b []byte) (s, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return "", base64.StdEncoding.EncodeToString(b)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body ExecRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	accept := r.Header.Get("Accept")
	switch {
	case strings.Contains(accept, "application/x-ndjson"):
		return s.streamExec(w, r, c, id, req, false)
	case strings.Contains(accept, "text/event-stream"):
		return s.streamExec(w, r, c, id, req, true)
	}
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	res, err := s.sup.Exec(r.Context(), c.sup, id, req)
	if err != nil {
		return err
	}
	resp := ExecResponse{Result: res}
	resp.Stdout, resp.StdoutBase64 = text(out.Bytes())
	resp.Stderr, resp.StderrBase64 = text(errb.Bytes())
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// eventWriter writes the events of one streaming exec, in order, as NDJSON
// lines or SSE events. The header goes out with the first event, so that
// an exec that cannot start still gets a plain error response.
type eventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	sse     bool
	started bool
	failed  bool
}

func (e *eventWriter) send(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return
	}
	if !e.started {
		e.started = true
		h := e.w.Header()
		if e.sse {
			h.Set("Content-Type", "text/event-stream")
		} else {
			h.Set("Content-Type", "application/x-ndjson")
		}
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		e.w.WriteHeader(http.StatusOK)
	}
	b, _ := json.Marshal(ev)
	var err error
	if e.sse {
		_, err = e.w.Write([]byte("event: " + ev.Type + "\ndata: "))
		if err == nil {
			_, err = e.w.Write(append(b, '\n', '\n'))
		}
	} else {
		_, err = e.w.Write(append(b, '\n'))
	}
	if err != nil {
		e.failed = true
		return
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// stream is one output stream of an exec as an io.Writer of events.
type stream struct {
	ev  *eventWriter
	typ string
}

func (s stream) Write(p []byte) (int, error) {
	ev := Event{Type: s.typ}
	ev.Data, ev.DataBase64 = text(p)
	s.ev.send(ev)
	return len(p), nil
}

func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, c *caller, id string, req supervisor.ExecRequest, sse bool) error {
	ev := &eventWriter{w: w, sse: sse}
	req.Stdout, req.Stderr = stream{ev, "stdout"}, stream{ev, "stderr"}
	res, err := s.sup.Exec(r.Context(), c.sup, id, req)
	if err != nil {
		ev.mu.Lock()
		started := ev.started
		ev.mu.Unlock()
		if !started {
			return err
		}
		e := classify(err)
		if e.Code == "internal" {
			s.log.Error("exec failed", "sandbox_id", id, "err", err)
			e.Message = "internal error; the daemon's log has the details"
		}
		ev.send(Event{Type: "error", Error: &errorDetail{Code: e.Code, Message: e.Message}})
		return nil
	}
	ev.send(Event{Type: "result", Result: &res})
	return nil
}
