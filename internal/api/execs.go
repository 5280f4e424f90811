package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
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
	// PTY runs the command on a terminal of this size, made inside the
	// sandbox: its output is one stream (events of type "pty"; stdout in
	// a plain answer), and stdin written to it is typed into it.
	PTY *sandbox.TermSize `json:"pty,omitempty"`
	// Rollback "on_failure" restores /workspace to its state before the
	// exec when the exec fails; the result's rollback says what was undone.
	Rollback string `json:"rollback,omitempty"`
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
	if b.PTY != nil {
		if err := b.PTY.Validate(); err != nil {
			return req, badRequest("pty: give rows and cols between 1 and %d", sandbox.MaxTermSide)
		}
		req.PTY = b.PTY
	}
	if len(req.Argv) == 0 && req.Code == "" && req.Language == "" {
		return req, badRequest("no command given: set argv, or code and language")
	}
	if req.Rollback, err = sandbox.ParseRollback(b.Rollback); err != nil {
		return req, err
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

// Event is one line of a streaming exec or of a followed process: first
// the process (type start, with its id, and pty when it runs on a
// terminal), then output (type stdout, stderr or pty, with data, or
// data_base64 when the chunk is not valid UTF-8; offset is the offset of
// its first byte in its stream, and missed, when set, says that many
// bytes before it were dropped before this caller read them), keepalives
// while nothing happens (type keepalive), and last the result (type
// result) or an error (type error).
type Event struct {
	Type       string            `json:"type"`
	ID         string            `json:"id,omitempty"`
	PTY        *sandbox.TermSize `json:"pty,omitempty"`
	Data       string            `json:"data,omitempty"`
	DataBase64 string            `json:"data_base64,omitempty"`
	Offset     *int64            `json:"offset,omitempty"`
	Missed     int64             `json:"missed,omitempty"`
	Result     *sandbox.Result   `json:"result,omitempty"`
	Error      *errorDetail      `json:"error,omitempty"`
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
	if sse, ok := streaming(r); ok {
		return s.streamExec(w, r, c, id, req, sse)
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

// eventWriter writes the events of one stream, in order, as NDJSON lines
// or SSE events. The header goes out with the first event, so that an exec
// that cannot start still gets a plain error response.
type eventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	sse     bool
	started bool
	failed  bool
	last    time.Time // when the last event went out
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
	if err == nil {
		err = http.NewResponseController(e.w).Flush()
	}
	if err != nil {
		e.failed = true
	}
	e.last = time.Now()
}

// gone reports whether the caller can no longer be written to.
func (e *eventWriter) gone() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return errCallerGone
	}
	return nil
}

func (e *eventWriter) isStarted() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// errCallerGone: the caller of a stream went away.
var errCallerGone = errors.New("the caller went away")

// keepalive sends a keepalive event whenever nothing went out for every;
// the returned func stops it, and returns once it has stopped (nothing may
// write to the response after its handler returned).
func (e *eventWriter) keepalive(every time.Duration) func() {
	stop, stopped := make(chan struct{}), make(chan struct{})
	e.mu.Lock()
	e.last = time.Now()
	e.mu.Unlock()
	go func() {
		defer close(stopped)
		t := time.NewTicker(every / 2)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				e.mu.Lock()
				idle := now.Sub(e.last) >= every
				e.mu.Unlock()
				if idle {
					e.send(Event{Type: "keepalive"})
				}
			}
		}
	}()
	return func() { close(stop); <-stopped }
}

// streamExec starts the command as a foreground exec and follows it. The
// exec outlives the stream: a caller whose connection drops comes back to
// it by the id of the first event (GET …/processes/{pid}/output), and one
// that wants it to stop kills it (POST …/processes/{pid}/signal).
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, c *caller, id string, req supervisor.ExecRequest, sse bool) error {
	ev := &eventWriter{w: w, sse: sse}
	p, err := s.sup.StartProcess(r.Context(), c.sup, id, supervisor.StartRequest{ExecRequest: req, Foreground: true})
	var ce *sandbox.CommandError
	if errors.As(err, &ce) {
		res := ce.Result()
		ev.send(Event{Type: "result", Result: &res})
		return nil
	}
	if err != nil {
		return err
	}
	return s.followEvents(r.Context(), ev, c, id, p.ID, supervisor.Offsets{})
}

// followEvents streams process pid's events from the given offsets until
// its result, or until the caller goes away.
func (s *Server) followEvents(ctx context.Context, ev *eventWriter, c *caller, id, pid string, from supervisor.Offsets) error {
	every := s.opts.Keepalive
	if every <= 0 {
		every = DefaultKeepalive
	}
	stop := ev.keepalive(every)
	defer stop()
	info, err := s.sup.Follow(ctx, c.sup, id, pid, from, func(p supervisor.ProcessInfo) error {
		ev.send(Event{Type: "start", ID: p.ID, PTY: p.PTY})
		return ev.gone()
	}, func(o supervisor.OutputEvent) error {
		e := Event{Type: o.Stream, Offset: &o.Offset, Missed: o.Missed}
		e.Data, e.DataBase64 = text(o.Data)
		ev.send(e)
		return ev.gone()
	})
	switch {
	case err == nil:
		ev.send(Event{Type: "result", Result: info.Result})
		return nil
	case !ev.isStarted():
		return err
	case errors.Is(err, errCallerGone), ctx.Err() != nil:
		return nil
	}
	e := classify(err)
	if e.Code == "internal" {
		s.log.Error("following a process failed", "sandbox_id", id, "process", pid, "err", err)
		e.Message = "internal error; the daemon's log has the details"
	}
	ev.send(Event{Type: "error", Error: &errorDetail{Code: e.Code, Message: e.Message}})
	return nil
}
