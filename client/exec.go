package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// ExecRequest says what to run: Argv, or Code in a Language ("python",
// "bash" or "sh").
type ExecRequest struct {
	Argv     []string
	Code     string
	Language string
	Env      map[string]string
	// Cwd is the working directory; empty means /workspace.
	Cwd string
	// Stdin is the command's whole standard input.
	Stdin []byte
	// Timeout bounds the command; zero means the sandbox's default (none
	// for a command on a terminal).
	Timeout time.Duration
	// PTY runs the command on a terminal of this size, made inside the
	// sandbox: its output is one stream (events of type "pty"; Stdout of
	// a plain Exec), and what WriteStdin sends is typed into it (Ctrl-C,
	// "\x03", interrupts its foreground job). Resize changes its size.
	PTY *TermSize
	// Rollback "on_failure" restores /workspace to its state before the
	// command when it fails (a non-zero exit, a signal, any limit hit);
	// Result.Rollback says what was undone. Foreground commands only.
	Rollback string
}

// Rollback values of ExecRequest.
const RollbackOnFailure = "on_failure"

// TermSize is the size of a terminal, in characters.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

type execBody struct {
	Argv      []string          `json:"argv,omitempty"`
	Code      string            `json:"code,omitempty"`
	Language  string            `json:"language,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	PTY       *TermSize         `json:"pty,omitempty"`
	Rollback  string            `json:"rollback,omitempty"`
	// For processes only.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty"`
}

func (r ExecRequest) body() execBody {
	b := execBody{Argv: r.Argv, Code: r.Code, Language: r.Language, Env: r.Env, Cwd: r.Cwd, TimeoutMS: r.Timeout.Milliseconds(), PTY: r.PTY, Rollback: r.Rollback}
	if len(r.Stdin) > 0 {
		b.Stdin = base64.StdEncoding.EncodeToString(r.Stdin)
	}
	return b
}

// Result says how a command ended.
type Result struct {
	// ExitCode is the exit status, or -1 when a signal ended the command.
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Reason: exit, timeout, cpu_time, oom, pids, output_limit, killed,
	// denied or error.
	Reason          string   `json:"reason"`
	LimitsHit       []string `json:"limits_hit"`
	Message         string   `json:"message,omitempty"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
	Usage           Usage    `json:"usage"`
	// Rollback is set when the command asked for rollback on failure.
	Rollback *Rollback `json:"rollback,omitempty"`
}

// Rollback says what a transactional command's rollback did: whether the
// workspace was restored (and why), and how many of the command's
// additions, changes and removals were undone.
type Rollback struct {
	RolledBack bool   `json:"rolled_back"`
	Why        string `json:"why,omitempty"`
	Snapshot   string `json:"snapshot,omitempty"`
	Added      int    `json:"added"`
	Changed    int    `json:"changed"`
	Removed    int    `json:"removed"`
	Error      string `json:"error,omitempty"`
}

// Usage is what a command consumed.
type Usage struct {
	WallMS          int64 `json:"wall_ms"`
	CPUMS           int64 `json:"cpu_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	BytesWritten    int64 `json:"bytes_written"`
}

// ExecResult is a finished command with its output.
type ExecResult struct {
	Stdout, Stderr []byte
	Result
}

func decodeOutput(s, b64 string) ([]byte, error) {
	if b64 != "" {
		return base64.StdEncoding.DecodeString(b64)
	}
	return []byte(s), nil
}

// Exec runs a command to its end and returns its output and result.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	var out struct {
		Stdout       string `json:"stdout"`
		Stderr       string `json:"stderr"`
		StdoutBase64 string `json:"stdout_base64"`
		StderrBase64 string `json:"stderr_base64"`
		Result       Result `json:"result"`
	}
	if err := c.call(ctx, request{method: "POST", path: sandboxPath(id, "exec"), json: req.body()}, &out); err != nil {
		return nil, err
	}
	res := &ExecResult{Result: out.Result}
	var err error
	if res.Stdout, err = decodeOutput(out.Stdout, out.StdoutBase64); err != nil {
		return nil, err
	}
	if res.Stderr, err = decodeOutput(out.Stderr, out.StderrBase64); err != nil {
		return nil, err
	}
	return res, nil
}

// Event is one event of a streaming exec or of a followed process.
type Event struct {
	// Type is "start" (first, with ID), "stdout", "stderr" or "pty"
	// (output, with Data), or "result" (last, with Result).
	Type string
	// ID is the process's id, on the start event: a caller whose stream
	// broke comes back to it with FollowProcess.
	ID string
	// PTY is the size of the process's terminal, on the start event; nil
	// when it runs on pipes.
	PTY *TermSize
	// Data is the output chunk of an output event, and Offset the offset
	// of its first byte in its stream.
	Data   []byte
	Offset int64
	// Missed, when not zero, says that many bytes before Offset were
	// dropped by the daemon before this caller read them (it kept up too
	// slowly, or came back too late).
	Missed int64
	// Result is set on the last event, of type "result".
	Result *Result
}

type wireEvent struct {
	Type       string    `json:"type"`
	ID         string    `json:"id"`
	PTY        *TermSize `json:"pty"`
	Data       string    `json:"data"`
	DataBase64 string    `json:"data_base64"`
	Offset     int64     `json:"offset"`
	Missed     int64     `json:"missed"`
	Result     *Result   `json:"result"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ErrStreamBroken is wrapped by the error of a stream of events that
// ended before the process's result. The process runs on: follow it again
// with FollowProcess, by the ID of the start event.
var ErrStreamBroken = errors.New("the stream ended before the result")

// events yields the events of resp's body until the result; keepalives
// are dropped. started is called with the start event's id.
func events(resp *http.Response, what string, started func(string)) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var we wireEvent
			if err := json.Unmarshal(sc.Bytes(), &we); err != nil {
				if !sc.Scan() && sc.Err() != nil {
					// The line was cut off where the stream broke.
					yield(Event{}, fmt.Errorf("airlock: %s: %w: %w", what, ErrStreamBroken, sc.Err()))
					return
				}
				yield(Event{}, fmt.Errorf("airlock: %s: bad event: %w", what, err))
				return
			}
			if we.Error != nil {
				yield(Event{}, &Error{Status: resp.StatusCode, Code: we.Error.Code, Message: we.Error.Message})
				return
			}
			if we.Type == "keepalive" {
				continue
			}
			if we.Type == "start" && started != nil {
				started(we.ID)
			}
			ev := Event{Type: we.Type, ID: we.ID, PTY: we.PTY, Offset: we.Offset, Missed: we.Missed, Result: we.Result}
			var err error
			if ev.Data, err = decodeOutput(we.Data, we.DataBase64); err != nil {
				yield(Event{}, fmt.Errorf("airlock: %s: bad event: %w", what, err))
				return
			}
			if !yield(ev, nil) || ev.Type == "result" {
				return
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		yield(Event{}, fmt.Errorf("airlock: %s: %w: %w", what, ErrStreamBroken, err))
	}
}

// ExecEvents runs a command and yields its events as they come: start
// (with the exec's id), output, then the result. An error ends the
// sequence. Stopping the iteration early, or ending ctx, kills the
// command; a stream that breaks on its own leaves it running (the error
// wraps ErrStreamBroken): come back to it with FollowProcess.
func (c *Client) ExecEvents(ctx context.Context, id string, req ExecRequest) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.do(sctx, request{method: "POST", path: sandboxPath(id, "exec"), json: req.body(), accept: "application/x-ndjson"})
		if err != nil {
			yield(Event{}, err)
			return
		}
		var pid string
		ended := false
		defer func() {
			if pid != "" && !ended {
				c.abandon(ctx, id, pid)
			}
		}()
		for ev, err := range events(resp, "exec", func(p string) { pid = p }) {
			if err != nil {
				if errors.Is(err, ErrStreamBroken) && ctx.Err() == nil && pid != "" {
					ended = true // the command runs on; the caller may come back to it
					err = fmt.Errorf("%w (the command runs on as process %s of sandbox %s)", err, pid, id)
				}
				yield(Event{}, err)
				return
			}
			if ev.Type == "result" {
				ended = true
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// abandon kills a command its caller stopped waiting for.
func (c *Client) abandon(ctx context.Context, id, pid string) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.Signal(kctx, id, pid, "KILL")
}

// ExecStream runs a command, calls fn with each output event as it comes,
// and returns the result. An error from fn stops the command and is
// returned.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, fn func(Event) error) (*Result, error) {
	for ev, err := range c.ExecEvents(ctx, id, req) {
		if err != nil {
			return nil, err
		}
		switch ev.Type {
		case "result":
			return ev.Result, nil
		case "start":
			continue
		}
		if err := fn(ev); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("airlock: exec: no result")
}

// StartProcessRequest starts a background process.
type StartProcessRequest struct {
	ExecRequest
	// KeepStdinOpen leaves standard input open for WriteStdin.
	KeepStdinOpen bool
}

// Process is a process of a sandbox: a background process, or an exec
// (Background false).
type Process struct {
	ID         string    `json:"id"`
	Argv       []string  `json:"argv"`
	StartedAt  time.Time `json:"started_at"`
	Running    bool      `json:"running"`
	Background bool      `json:"background"`
	// PTY is the size of its terminal; nil when it runs on pipes.
	PTY *TermSize `json:"pty,omitempty"`
	// Result is set once it has ended.
	Result *Result `json:"result,omitempty"`
	// Stdout and Stderr are filled by WaitProcess (the tail the daemon
	// keeps) and ProcessOutput (from the offsets asked for); StdoutOffset
	// and StderrOffset are the offsets of their first bytes.
	Stdout, Stderr             []byte `json:"-"`
	StdoutOffset, StderrOffset int64  `json:"-"`
}

type wireProcess struct {
	Process
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutBase64 string `json:"stdout_base64"`
	StderrBase64 string `json:"stderr_base64"`
	StdoutOffset int64  `json:"stdout_offset"`
	StderrOffset int64  `json:"stderr_offset"`
}

func (w wireProcess) process() (*Process, error) {
	p := w.Process
	var err error
	if p.Stdout, err = decodeOutput(w.Stdout, w.StdoutBase64); err != nil {
		return nil, err
	}
	if p.Stderr, err = decodeOutput(w.Stderr, w.StderrBase64); err != nil {
		return nil, err
	}
	p.StdoutOffset, p.StderrOffset = w.StdoutOffset, w.StderrOffset
	return &p, nil
}

// StartProcess starts a background process and returns at once.
func (c *Client) StartProcess(ctx context.Context, id string, req StartProcessRequest) (*Process, error) {
	b := req.body()
	b.KeepStdinOpen = req.KeepStdinOpen
	var w wireProcess
	if err := c.call(ctx, request{method: "POST", path: sandboxPath(id, "processes"), json: b}, &w); err != nil {
		return nil, err
	}
	return w.process()
}

// ListProcesses lists the sandbox's background processes.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]Process, error) {
	var out struct {
		Processes []Process `json:"processes"`
	}
	err := c.call(ctx, request{method: "GET", path: sandboxPath(id, "processes")}, &out)
	return out.Processes, err
}

// WriteStdin sends data to process pid's standard input and closes it when
// eof is set.
func (c *Client) WriteStdin(ctx context.Context, id, pid string, data []byte, eof bool) error {
	body := map[string]any{"data": base64.StdEncoding.EncodeToString(data), "eof": eof}
	return c.call(ctx, request{method: "POST", path: sandboxPath(id, "processes", url.PathEscape(pid), "stdin"), json: body}, nil)
}

// Signal sends a signal ("SIGTERM", "KILL", "15") to process pid.
func (c *Client) Signal(ctx context.Context, id, pid, sig string) error {
	body := map[string]string{"signal": sig}
	return c.call(ctx, request{method: "POST", path: sandboxPath(id, "processes", url.PathEscape(pid), "signal"), json: body}, nil)
}

// WaitProcess waits until process pid ends, or at most timeout (zero: as
// long as ctx allows), and returns it with its output; Running is still
// true when the wait timed out.
func (c *Client) WaitProcess(ctx context.Context, id, pid string, timeout time.Duration) (*Process, error) {
	q := url.Values{}
	if timeout > 0 {
		q.Set("timeout_ms", itoa(timeout.Milliseconds()))
	}
	var w wireProcess
	if err := c.call(ctx, request{method: "GET", path: sandboxPath(id, "processes", url.PathEscape(pid), "wait"), query: q}, &w); err != nil {
		return nil, err
	}
	return w.process()
}

// ExecResult returns exec (or process) pid of sandbox id as it is now,
// without waiting: Running, or its Result and the tail of its output. It
// is how a caller whose stream broke (the daemon restarted) fetches the
// result of its exec, by the id of the stream's start event; an ended one
// stays readable for an hour, then IsNotFound.
func (c *Client) ExecResult(ctx context.Context, id, pid string) (*Process, error) {
	var w wireProcess
	if err := c.call(ctx, request{method: "GET", path: sandboxPath(id, "execs", url.PathEscape(pid))}, &w); err != nil {
		return nil, err
	}
	return w.process()
}

// Offsets say where in a process's output streams a caller starts: byte
// offsets in stdout (a terminal's output is stdout) and stderr, or Now
// for only what comes next.
type Offsets struct {
	Stdout, Stderr int64
	Now            bool
}

func (o Offsets) query() url.Values {
	q := url.Values{}
	if o.Now {
		q.Set("from", "now")
		return q
	}
	if o.Stdout > 0 {
		q.Set("stdout_offset", itoa(o.Stdout))
	}
	if o.Stderr > 0 {
		q.Set("stderr_offset", itoa(o.Stderr))
	}
	return q
}

// FollowProcess yields process pid's events from the given offsets on as
// they come: start, output, then the result once it has ended. Any number
// of callers may follow one process; one that reads too slowly misses
// output (Event.Missed says how much) but never slows the process.
// Stopping the iteration leaves the process running.
func (c *Client) FollowProcess(ctx context.Context, id, pid string, from Offsets) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "processes", url.PathEscape(pid), "output"), query: from.query(), accept: "application/x-ndjson"})
		if err != nil {
			yield(Event{}, err)
			return
		}
		for ev, err := range events(resp, "follow "+pid, nil) {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// ProcessOutput returns process pid with what it printed from the given
// offsets on, as much as the daemon keeps, without waiting.
func (c *Client) ProcessOutput(ctx context.Context, id, pid string, from Offsets) (*Process, error) {
	var w wireProcess
	if err := c.call(ctx, request{method: "GET", path: sandboxPath(id, "processes", url.PathEscape(pid), "output"), query: from.query()}, &w); err != nil {
		return nil, err
	}
	return w.process()
}

// Resize sets the size of process pid's terminal.
func (c *Client) Resize(ctx context.Context, id, pid string, size TermSize) error {
	return c.call(ctx, request{method: "POST", path: sandboxPath(id, "processes", url.PathEscape(pid), "resize"), json: size}, nil)
}
