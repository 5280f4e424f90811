package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
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
	// Timeout bounds the command; zero means the sandbox's default.
	Timeout time.Duration
}

type execBody struct {
	Argv      []string          `json:"argv,omitempty"`
	Code      string            `json:"code,omitempty"`
	Language  string            `json:"language,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	// For processes only.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty"`
}

func (r ExecRequest) body() execBody {
	b := execBody{Argv: r.Argv, Code: r.Code, Language: r.Language, Env: r.Env, Cwd: r.Cwd, TimeoutMS: r.Timeout.Milliseconds()}
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

// Event is one event of a streaming exec.
type Event struct {
	// Type is "stdout", "stderr" or "result".
	Type string
	// Data is the output chunk of a stdout or stderr event.
	Data []byte
	// Result is set on the last event, of type "result".
	Result *Result
}

type wireEvent struct {
	Type       string  `json:"type"`
	Data       string  `json:"data"`
	DataBase64 string  `json:"data_base64"`
	Result     *Result `json:"result"`
	Error      *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ExecEvents runs a command and yields its output as it comes, then its
// result. An error ends the sequence. Stopping the iteration early kills
// the command.
func (c *Client) ExecEvents(ctx context.Context, id string, req ExecRequest) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		resp, err := c.do(ctx, request{method: "POST", path: sandboxPath(id, "exec"), json: req.body(), accept: "application/x-ndjson"})
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var we wireEvent
			if err := json.Unmarshal(sc.Bytes(), &we); err != nil {
				yield(Event{}, fmt.Errorf("airlock: exec: bad event: %w", err))
				return
			}
			if we.Error != nil {
				yield(Event{}, &Error{Status: resp.StatusCode, Code: we.Error.Code, Message: we.Error.Message})
				return
			}
			ev := Event{Type: we.Type, Result: we.Result}
			if ev.Data, err = decodeOutput(we.Data, we.DataBase64); err != nil {
				yield(Event{}, fmt.Errorf("airlock: exec: bad event: %w", err))
				return
			}
			if !yield(ev, nil) || ev.Type == "result" {
				return
			}
		}
		err = sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		yield(Event{}, fmt.Errorf("airlock: exec: the stream ended before the result: %w", err))
	}
}

// ExecStream runs a command, calls fn with each output event as it comes,
// and returns the result. An error from fn stops the command and is
// returned.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, fn func(Event) error) (*Result, error) {
	for ev, err := range c.ExecEvents(ctx, id, req) {
		if err != nil {
			return nil, err
		}
		if ev.Type == "result" {
			return ev.Result, nil
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

// Process is a background process.
type Process struct {
	ID        string    `json:"id"`
	Argv      []string  `json:"argv"`
	StartedAt time.Time `json:"started_at"`
	Running   bool      `json:"running"`
	// Result is set once it has ended.
	Result *Result `json:"result,omitempty"`
	// Stdout and Stderr are filled by WaitProcess.
	Stdout, Stderr []byte `json:"-"`
}

type wireProcess struct {
	Process
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutBase64 string `json:"stdout_base64"`
	StderrBase64 string `json:"stderr_base64"`
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
