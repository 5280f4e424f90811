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

// Process is the wire form of a background process.
type Process struct {
	ID        string          `json:"id"`
	Argv      []string        `json:"argv"`
	StartedAt time.Time       `json:"started_at"`
	Running   bool            `json:"running"`
	Result    *sandbox.Result `json:"result,omitempty"`
	// Output, filled only by wait.
	Stdout       string `json:"stdout,omitempty"`
	Stderr       string `json:"stderr,omitempty"`
	StdoutBase64 string `json:"stdout_base64,omitempty"`
	StderrBase64 string `json:"stderr_base64,omitempty"`
}

func wireProcess(p supervisor.ProcessInfo) Process {
	out := Process{ID: p.ID, Argv: p.Argv, StartedAt: p.Started, Running: p.Running, Result: p.Result}
	out.Stdout, out.StdoutBase64 = text(p.Stdout)
	out.Stderr, out.StderrBase64 = text(p.Stderr)
	return out
}

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

func processID(r *http.Request) (string, error) {
	pid := r.PathValue("pid")
	if !sandbox.ValidID(pid) {
		return "", &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such process"}
	}
	return pid, nil
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
	writeJSON(w, http.StatusCreated, wireProcess(p))
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
		out.Processes = append(out.Processes, wireProcess(p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) processStdin(w http.ResponseWriter, r *http.Request, c *caller) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	pid, err := processID(r)
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
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	pid, err := processID(r)
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
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	pid, err := processID(r)
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
				writeJSON(w, http.StatusOK, wireProcess(q))
				return nil
			}
		}
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such process"}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wireProcess(p))
	return nil
}
