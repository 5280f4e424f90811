package api

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// StartProcessRequest is the body of POST /v1/sandboxes/{id}/processes.
type StartProcessRequest struct {
	ExecRequest
	// KeepStdinOpen leaves standard input open after stdin, for
	// POST …/processes/{pid}/stdin.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty"`
}

// Process is the wire form of a process of a sandbox: a background
// process, or an exec (background false).
type Process struct {
	ID         string            `json:"id"`
	Argv       []string          `json:"argv"`
	StartedAt  time.Time         `json:"started_at"`
	Running    bool              `json:"running"`
	Background bool              `json:"background"`
	PTY        *sandbox.TermSize `json:"pty,omitempty"`
	Result     *sandbox.Result   `json:"result,omitempty"`
	// Output, filled only by wait (the tail the daemon keeps) and output
	// (from the offsets asked for); the offsets are those of the first
	// bytes in their streams (a terminal's output is stdout).
	Stdout       string `json:"stdout,omitempty"`
	Stderr       string `json:"stderr,omitempty"`
	StdoutBase64 string `json:"stdout_base64,omitempty"`
	StderrBase64 string `json:"stderr_base64,omitempty"`
	StdoutOffset *int64 `json:"stdout_offset,omitempty"`
	StderrOffset *int64 `json:"stderr_offset,omitempty"`
}

func wireProcess(p supervisor.ProcessInfo, output bool) Process {
	out := Process{ID: p.ID, Argv: p.Argv, StartedAt: p.Started, Running: p.Running, Background: p.Background, PTY: p.PTY, Result: p.Result}
	if output {
		out.Stdout, out.StdoutBase64 = text(p.Stdout)
		out.Stderr, out.StderrBase64 = text(p.Stderr)
		out.StdoutOffset, out.StderrOffset = &p.StdoutOffset, &p.StderrOffset
	}
	return out
}

// ResizeRequest is the body of POST …/processes/{pid}/resize.
type ResizeRequest = sandbox.TermSize

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// StdinRequest is the body of POST …/processes/{pid}/stdin.
type StdinRequest struct {
	// Data is base64.
	Data string `json:"data,omitempty"`
	// EOF closes standard input after Data.
	EOF bool `json:"eof,omitempty"`
}

// SignalRequest is the body of POST …/processes/{pid}/signal: a name
// ("SIGTERM" or "TERM") or a number ("15").
type SignalRequest struct {
	Signal string `json:"signal"`
}

// parseSignal reads a signal name or number.
func parseSignal(s string) (syscall.Signal, error) {
	sig, err := sandbox.ParseSignal(s)
	if err != nil {
		return 0, badRequest("%s", strings.TrimPrefix(err.Error(), sandbox.ErrInvalid.Error()+": "))
	}
	return sig, nil
}

// processID reads a process route's sandbox and process ids, answering 404
// for either that cannot name one.
func processID(r *http.Request) (id, pid string, err error) {
	if id, err = sandboxID(r); err != nil {
		return "", "", err
	}
	pid = r.PathValue("pid")
	if !sandbox.ValidID(pid) {
		return "", "", &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such process"}
	}
	return id, pid, nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body StartProcessRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	req, err := body.request()
	if err != nil {
		return err
	}
	p, err := s.sup.StartProcess(r.Context(), c.sup, id, supervisor.StartRequest{ExecRequest: req, KeepStdinOpen: body.KeepStdinOpen})
	if err != nil {
		return err
	}
	if sse, ok := streaming(r); ok {
		// Start and follow: the process runs on when the stream ends.
		return s.followEvents(r.Context(), &eventWriter{w: w, sse: sse}, c, id, p.ID, supervisor.Offsets{})
	}
	writeJSON(w, http.StatusCreated, wireProcess(p, false))
	return nil
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	ps, err := s.sup.Processes(r.Context(), c.sup, id)
	if err != nil {
		return err
	}
	out := ProcessList{Processes: make([]Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, wireProcess(p, false))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	var body StdinRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	data, err := base64.StdEncoding.DecodeString(body.Data)
	if err != nil {
		return badRequest("data: give standard base64")
	}
	if err := s.sup.WriteStdin(r.Context(), c.sup, id, pid, data, body.EOF); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) processSignal(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	var body SignalRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	sig, err := parseSignal(body.Signal)
	if err != nil {
		return err
	}
	if err := s.sup.Signal(r.Context(), c.sup, id, pid, sig); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// processWait waits for the process to end, at most timeout_ms (default:
// as long as the request lasts), and returns it; running is still true
// when the wait timed out.
func (s *Server) processWait(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if v := r.URL.Query().Get("timeout_ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return badRequest("timeout_ms %q: give a number of milliseconds", truncate(v, 40))
		}
		d, err := millis("timeout_ms", ms)
		if err != nil {
			return err
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	p, err := s.sup.Wait(ctx, c.sup, id, pid)
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
		ps, err := s.sup.Processes(r.Context(), c.sup, id)
		if err != nil {
			return err
		}
		for _, q := range ps {
			if q.ID == pid {
				writeJSON(w, http.StatusOK, wireProcess(q, false))
				return nil
			}
		}
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such process"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireProcess(p, true))
	return nil
}

// streaming says whether the caller asks for a stream of events, and
// whether as SSE.
func streaming(r *http.Request) (sse, ok bool) {
	accept := r.Header.Get("Accept")
	switch {
	case strings.Contains(accept, "application/x-ndjson"):
		return false, true
	case strings.Contains(accept, "text/event-stream"):
		return true, true
	}
	return false, false
}

// offsets reads where in its output streams a caller starts:
// stdout_offset and stderr_offset (a terminal's stream is stdout), or
// from=now for only what comes next.
func offsets(r *http.Request) (supervisor.Offsets, error) {
	var o supervisor.Offsets
	q := r.URL.Query()
	switch q.Get("from") {
	case "", "start":
	case "now":
		o.Now = true
	default:
		return o, badRequest("from %q: use start or now", truncate(q.Get("from"), 40))
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"stdout_offset", &o.Stdout}, {"stderr_offset", &o.Stderr}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return o, badRequest("%s %q: give a byte offset, 0 or more", f.name, truncate(v, 40))
		}
		*f.v = n
	}
	return o, nil
}

// processOutput answers with what the process printed from the offsets
// asked for; with Accept: application/x-ndjson or text/event-stream it
// follows the process instead, streaming its output as it comes until
// its result (the process runs on when the caller goes away).
func (s *Server) processOutput(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	from, err := offsets(r)
	if err != nil {
		return err
	}
	if sse, ok := streaming(r); ok {
		return s.followEvents(r.Context(), &eventWriter{w: w, sse: sse}, c, id, pid, from)
	}
	p, err := s.sup.Output(r.Context(), c.sup, id, pid, from)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireProcess(p, true))
	return nil
}

// processResize sets the size of a process's terminal.
func (s *Server) processResize(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	var body ResizeRequest
	if err := decodeJSON(w, r, &body); err != nil {
		return err
	}
	if err := body.Validate(); err != nil {
		return badRequest("give rows and cols between 1 and %d", sandbox.MaxTermSide)
	}
	if err := s.sup.Resize(r.Context(), c.sup, id, pid, body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// execResult answers GET …/execs/{pid}: the exec (or process) as it is
// now, at once: running, or ended with its result and the tail of its
// output. The result of an exec whose caller's connection died (with the
// daemon, say) is fetched this way, by the id its stream's start event
// carried, for an hour after it ended.
func (s *Server) execResult(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, pid, err := processID(r)
	if err != nil {
		return err
	}
	p, err := s.sup.ExecResult(r.Context(), c.sup, id, pid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireProcess(p, true))
	return nil
}
