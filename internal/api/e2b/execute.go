package e2b

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// This file is the code interpreter's /execute: a run of code in a
// context's kernel, streamed back as E2B's NDJSON (stdout, stderr, result,
// error, number_of_executions, end_of_execution). A run is admitted as an
// exec of its code (the key's rate, the policy, the audit log). Its time
// limit is its template's timeout where the template sets one (none
// otherwise, as on E2B), and a run that passes it, or whose
// caller goes away, is interrupted: the kernel gets SIGINT, keeps its
// state, and the next run starts at once.

// maxLine bounds one line of the bridge's output (a plot is one line).
const maxLine = 64 << 20

// interruptGrace is how long an interrupted run may take to end before its
// kernel is killed (and started again by the next run).
const interruptGrace = 10 * time.Second

// lineReader cuts a followed stream into lines. Output the follower
// missed (the ring moved on) drops the partial line and the rest of it.
type lineReader struct {
	buf    []byte
	skip   bool // in a line whose start was missed
	missed int64
}

// feed takes one piece of output and calls fn with each line it
// completes and the stream offset just after it.
func (l *lineReader) feed(o supervisor.OutputEvent, fn func(line []byte, end int64) error) error {
	if o.Missed > 0 {
		l.missed += o.Missed
		l.buf, l.skip = l.buf[:0], true
	}
	data, at := o.Data, o.Offset
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !l.skip {
				if len(l.buf)+len(data) > maxLine {
					l.buf, l.skip = l.buf[:0], true
					l.missed += int64(len(data))
				} else {
					l.buf = append(l.buf, data...)
				}
			}
			return nil
		}
		end := at + int64(i) + 1
		if l.skip {
			l.skip = false
		} else {
			line := append(l.buf, data[:i]...)
			l.buf = l.buf[:0]
			if err := fn(line, end); err != nil {
				return err
			}
		}
		data, at = data[i+1:], end
	}
	return nil
}

// ndjson writes E2B's lines to a caller who may be gone: after the first
// failed write it writes nothing more.
type ndjson struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	failed bool
	last   time.Time
}

func (n *ndjson) send(v any) {
	b, _ := json.Marshal(v)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = time.Now()
	if n.failed {
		return
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		n.failed = true
		return
	}
	if http.NewResponseController(n.w).Flush() != nil {
		n.failed = true
	}
}

type outputLine struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Timestamp int64  `json:"timestamp"`
}

type errorLine struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

type countLine struct {
	Type  string `json:"type"`
	Count int    `json:"execution_count"`
}

type typeLine struct {
	Type string `json:"type"`
}

// resultFields maps a Jupyter MIME bundle to E2B's result fields.
var resultFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// resultLine is E2B's result of a MIME bundle: its known types as their
// fields (text with a string's quotes taken off, as E2B does), the
// others under extra.
func resultLine(main bool, data map[string]json.RawMessage) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": main}
	extra := map[string]json.RawMessage{}
	for mime, v := range data {
		field, ok := resultFields[mime]
		if !ok {
			extra[mime] = v
			continue
		}
		if field == "text" {
			var s string
			if json.Unmarshal(v, &s) == nil {
				if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
					s = s[1 : len(s)-1]
				}
				out[field] = s
				continue
			}
		}
		out[field] = v
	}
	if len(extra) > 0 {
		out["extra"] = extra
	}
	return out
}

// executeRequest is the body of /execute.
type executeRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id"`
	Language  *string           `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

// maxCode bounds the code of one run.
const maxCode = 8 << 20

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, t *target) error {
	var body executeRequest
	if err := decodeLimited(w, r, &body, maxCode+1<<20); err != nil {
		return err
	}
	if body.ContextID != nil && *body.ContextID != "" && body.Language != nil && *body.Language != "" {
		return errorf(http.StatusBadRequest, "give a context_id or a language, not both")
	}
	id := defaultContext
	if body.ContextID != nil && *body.ContextID != "" {
		id = *body.ContextID
	} else if body.Language != nil {
		if _, err := checkLanguage(*body.Language); err != nil {
			return err
		}
	}
	if len(body.Code) > maxCode {
		return errorf(http.StatusRequestEntityTooLarge, "code is %d bytes; at most %d run at once", len(body.Code), maxCode)
	}
	for k := range body.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errorf(http.StatusBadRequest, "env_vars: %q is not a variable name", truncate(k, 80))
		}
	}
	k, err := h.context(r.Context(), t, id)
	if err != nil {
		return err
	}
	// A run's limit is its template's timeout where the template sets one;
	// otherwise none but the sandbox's lifetime, as on E2B, where the SDK's
	// timeoutMs ends the request (and so interrupts the run) on its side.
	timeout := h.commandCeiling(t.info)
	ctx, end, err := h.sup.Cell(r.Context(), t.c.sup, t.info.ID, k.language, body.Code, k.cwd, timeout)
	var denied *policy.Denied
	if errors.As(err, &denied) {
		// A refused cell is an execution error the SDK returns in
		// execution.error (no traceback: nothing ran), not an HTTP error.
		startNDJSON(w)
		out := &ndjson{w: w, last: time.Now()}
		out.send(errorLine{Type: "error", Name: DeniedName, Value: deniedText(denied)})
		out.send(typeLine{Type: "end_of_execution"})
		return nil
	}
	if err != nil {
		return err
	}
	res := sandbox.Result{Reason: sandbox.ReasonError, ExitCode: -1, LimitsHit: []sandbox.Limit{}}
	outSum, errSum := sha256.New(), sha256.New()
	defer func() { end(res, hex.EncodeToString(outSum.Sum(nil)), hex.EncodeToString(errSum.Sum(nil))) }()
	if err := k.lock(ctx); err != nil {
		return err
	}
	defer k.unlock()
	if err := h.ensure(ctx, t, k); err != nil {
		return err
	}
	startNDJSON(w)
	out := &ndjson{w: w, last: time.Now()}
	res = h.runCell(ctx, r.Context(), t, k, body, timeout, out, outSum, errSum)
	return nil
}

// DeniedName is the error name of a cell the policy refused.
const DeniedName = "PolicyDenied"

// startNDJSON sends /execute's response header at once: the SDK's
// timeout starts with it.
func startNDJSON(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

// decodeLimited is decode with a larger bound.
func decodeLimited(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "the request body is larger than %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "malformed JSON body: %s", truncate(err.Error(), 200))
	}
	return nil
}

// errCellDone ends the following of a run at its end line.
var errCellDone = errors.New("cell done")

// runCell runs one cell in k (whose bridge runs; k.sem held) and streams
// its lines to out. ctx is the admitted context, caller the request's
// (its end, the caller leaving, interrupts the cell). It returns the
// cell's result for the audit log.
func (h *Handler) runCell(ctx, caller context.Context, t *target, k *kernel, body executeRequest, timeout time.Duration, out *ndjson, outSum, errSum hash.Hash) sandbox.Result {
	start := time.Now()
	res := sandbox.Result{Reason: sandbox.ReasonExit, LimitsHit: []sandbox.Limit{}}
	rid := newToken()[:16]
	req, _ := json.Marshal(map[string]any{"op": "run", "id": rid, "code": body.Code, "env": body.EnvVars})
	// The following outlives the caller, to read the run to its end and
	// keep the bridge's offset right.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if err := h.sup.WriteStdin(fctx, t.c.sup, t.info.ID, k.pid, append(req, '\n'), false); err != nil {
		out.send(errorLine{Type: "error", Name: "KernelUnavailable", Value: "the kernel's process is gone; run again to start a new one"})
		out.send(typeLine{Type: "end_of_execution"})
		k.pid = ""
		res.Reason, res.ExitCode, res.Message = sandbox.ReasonError, -1, err.Error()
		return res
	}
	// Interrupt on the time limit or when the caller leaves; kill the
	// kernel when an interrupt does not end the run.
	var once sync.Once
	var why sandbox.Reason
	interrupted := make(chan struct{})
	interrupt := func(reason sandbox.Reason) {
		once.Do(func() {
			why = reason
			close(interrupted)
			line := []byte(`{"op":"interrupt"}` + "\n")
			_ = h.sup.WriteStdin(fctx, t.c.sup, t.info.ID, k.pid, line, false)
			time.AfterFunc(interruptGrace, cancel)
		})
	}
	stopLimit := func() bool { return false }
	if timeout > 0 {
		stopLimit = time.AfterFunc(timeout, func() { interrupt(sandbox.ReasonTimeout) }).Stop
	}
	defer stopLimit()
	stopWatch := context.AfterFunc(caller, func() { interrupt(sandbox.ReasonKilled) })
	defer stopWatch()
	stopKA := h.keepalive(http.Header{}, func() error {
		out.mu.Lock()
		idle := time.Since(out.last) >= h.opts.Keepalive
		out.mu.Unlock()
		if idle {
			out.send(typeLine{Type: "keepalive"})
		}
		return nil
	})
	defer stopKA()

	var lr lineReader
	sentMissed := int64(0)
	failed := false
	info, err := h.sup.Follow(fctx, t.c.sup, t.info.ID, k.pid, supervisor.Offsets{Stdout: k.off}, nil, func(o supervisor.OutputEvent) error {
		if o.Stream != supervisor.StreamStdout {
			return nil
		}
		err := lr.feed(o, func(line []byte, end int64) error {
			k.off = end
			var bl bridgeLine
			if json.Unmarshal(line, &bl) != nil || bl.ID != rid {
				return nil
			}
			switch bl.Type {
			case "stdout", "stderr":
				sum := outSum
				if bl.Type == "stderr" {
					sum = errSum
				}
				sum.Write([]byte(bl.Text))
				out.send(outputLine{Type: bl.Type, Text: bl.Text, Timestamp: time.Now().UnixMicro()})
			case "result":
				out.send(resultLine(bl.Main, bl.Data))
			case "error":
				failed = true
				out.send(errorLine{Type: "error", Name: bl.Name, Value: bl.Value, Traceback: bl.Traceback})
			case "count":
				out.send(countLine{Type: "number_of_executions", Count: bl.N})
			case "end":
				return errCellDone
			}
			return nil
		})
		if lr.missed > sentMissed {
			out.send(outputLine{Type: "stderr", Text: fmt.Sprintf("[airlock: %d bytes of this run's output were dropped before they could be read]\n", lr.missed-sentMissed), Timestamp: time.Now().UnixMicro()})
			sentMissed = lr.missed
		}
		return err
	})
	switch {
	case errors.Is(err, errCellDone):
	case err == nil:
		// The bridge ended in the middle of the run.
		out.send(errorLine{Type: "error", Name: "DeadKernelError", Value: "the kernel's process ended: " + resultText(info.Result) + "; run again to start a new one (its state is lost)"})
		k.pid = ""
		failed = true
	default:
		// The interrupt did not end the run in time: kill the kernel.
		out.send(errorLine{Type: "error", Name: "TimeoutError", Value: fmt.Sprintf("the run did not stop within %s of its interrupt; its kernel was killed and its state is lost", interruptGrace)})
		h.killKernel(context.WithoutCancel(ctx), t, k)
		failed = true
	}
	out.send(typeLine{Type: "end_of_execution"})
	stopLimit()
	stopWatch()
	select {
	case <-interrupted:
		// why was set before interrupted closed.
		res.ExitCode, res.Reason = -1, why
		if why == sandbox.ReasonTimeout {
			res.LimitsHit = append(res.LimitsHit, sandbox.LimitTimeout)
			res.Message = fmt.Sprintf("the run passed the sandbox's time limit of %s and was interrupted", timeout)
		}
	default:
		if failed {
			res.ExitCode = 1
		}
	}
	res.Usage.WallMS = time.Since(start).Milliseconds()
	return res
}
