package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// RunCodeInput is the input of run_code.
type RunCodeInput struct {
	Code      string            `json:"code" jsonschema:"the program text"`
	Language  string            `json:"language,omitempty" jsonschema:"python (default), bash or sh"`
	TimeoutS  float64           `json:"timeout_s,omitempty" jsonschema:"wall-time limit in seconds (default: the sandbox's, 10 s unless configured)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	SandboxID string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// RunCommandInput is the input of run_command.
type RunCommandInput struct {
	Command    string            `json:"command" jsonschema:"a shell command line (run with sh -c), or the program when args is given"`
	Args       []string          `json:"args,omitempty" jsonschema:"arguments: when given, command is run directly with them, without a shell"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"working directory (default /workspace)"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	TimeoutS   float64           `json:"timeout_s,omitempty" jsonschema:"wall-time limit in seconds (default: the sandbox's for a foreground command, none in the background)"`
	Background bool              `json:"background,omitempty" jsonschema:"start it and return at once with its pid (see process_list, process_output, process_wait, process_send_input, process_kill)"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text for its standard input"`
	PTY        bool              `json:"pty,omitempty" jsonschema:"run it on a terminal (80x24), for programs that need one (a REPL, an installer that asks questions): its output is one stream, stdout, with the terminal's control sequences; in the background, type into it with process_send_input (\\u0003 is Ctrl-C) and read it with process_output"`
	SandboxID  string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
	// RollbackOnFailure makes the command transactional.
	RollbackOnFailure bool `json:"rollback_on_failure,omitempty" jsonschema:"if the command fails (non-zero exit, killed, any limit hit), put /workspace back exactly as it was before it ran; the result says what was undone (not for background commands)"`
}

// RunPythonCodeInput is the input of run_python_code (the argument names of
// pydantic's mcp-run-python).
type RunPythonCodeInput struct {
	PythonCode      string         `json:"python_code" jsonschema:"the Python program"`
	GlobalVariables map[string]any `json:"global_variables,omitempty" jsonschema:"variables (JSON values) defined before the program runs"`
	SandboxID       string         `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ExecuteCodeInput is the input of execute_code (the argument names of
// llm-sandbox).
type ExecuteCodeInput struct {
	Code      string   `json:"code" jsonschema:"the program text"`
	Language  string   `json:"language,omitempty" jsonschema:"python (default), bash or sh"`
	Libraries []string `json:"libraries,omitempty" jsonschema:"not installed: the sandbox has no package index; only what the template has is available"`
	Timeout   float64  `json:"timeout,omitempty" jsonschema:"wall-time limit in seconds (default: the sandbox's, 10 s unless configured)"`
	SandboxID string   `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ExecuteInput is the input of execute (the argument names of deepagents).
type ExecuteInput struct {
	Command   string  `json:"command" jsonschema:"a shell command line (run with sh -c)"`
	Timeout   float64 `json:"timeout,omitempty" jsonschema:"wall-time limit in seconds"`
	SandboxID string  `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ExecOutput is the structured result of a command.
type ExecOutput struct {
	SandboxID string `json:"sandbox_id"`
	// PID and Running are set for a background process.
	PID     string `json:"pid,omitempty" jsonschema:"the id of a background process"`
	Running bool   `json:"running,omitempty" jsonschema:"the background process is still running"`

	ExitCode        int      `json:"exit_code" jsonschema:"exit status, or -1 when a signal ended it"`
	Reason          string   `json:"reason,omitempty" jsonschema:"why it ended: exit, timeout, cpu_time, oom, pids, output_limit, killed, denied or error"`
	Signal          string   `json:"signal,omitempty"`
	Message         string   `json:"message,omitempty" jsonschema:"why it was stopped, when it did not simply exit"`
	LimitsHit       []string `json:"limits_hit,omitempty"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutTruncated bool     `json:"stdout_truncated,omitempty"`
	StderrTruncated bool     `json:"stderr_truncated,omitempty"`
	WallMS          int64    `json:"wall_ms,omitempty"`
	Notes           []string `json:"notes,omitempty"`
	// Rollback says what a rollback_on_failure command's rollback did.
	Rollback *sandbox.Rollback `json:"rollback,omitempty" jsonschema:"set when rollback_on_failure was asked: rolled_back, why, and the counts of the command's changes it undid"`
}

// PIDInput names a background process.
type PIDInput struct {
	PID       string `json:"pid" jsonschema:"the process id run_command returned"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessKillInput is the input of process_kill.
type ProcessKillInput struct {
	PID       string `json:"pid" jsonschema:"the process id run_command returned"`
	Signal    string `json:"signal,omitempty" jsonschema:"SIGKILL (default: the process and everything it started), SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 or a number"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessSendInputInput is the input of process_send_input.
type ProcessSendInputInput struct {
	PID       string `json:"pid" jsonschema:"the process id run_command returned (with background true)"`
	Data      string `json:"data" jsonschema:"text to write to its standard input (add \\n to end a line)"`
	EOF       bool   `json:"eof,omitempty" jsonschema:"close its standard input afterwards"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessWaitInput is the input of process_wait.
type ProcessWaitInput struct {
	PID       string  `json:"pid" jsonschema:"the process id run_command returned"`
	TimeoutS  float64 `json:"timeout_s,omitempty" jsonschema:"how long to wait for it to end, in seconds (default 10, at most 300)"`
	SandboxID string  `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessOutputInput is the input of process_output.
type ProcessOutputInput struct {
	PID          string  `json:"pid" jsonschema:"the process id run_command returned"`
	StdoutOffset int64   `json:"stdout_offset,omitempty" jsonschema:"where in its stdout to start, in bytes: 0 (default) for the oldest output kept, or the next_stdout_offset of the last call for only what is new"`
	StderrOffset int64   `json:"stderr_offset,omitempty" jsonschema:"the same for stderr"`
	WaitS        float64 `json:"wait_s,omitempty" jsonschema:"when there is nothing new yet, wait up to this many seconds for output or its end (default 0, at most 60)"`
	SandboxID    string  `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessOutputOutput is the result of process_output.
type ProcessOutputOutput struct {
	SandboxID string `json:"sandbox_id"`
	PID       string `json:"pid"`
	Running   bool   `json:"running"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	// The offsets of the text returned, and where the next call starts.
	StdoutOffset     int64  `json:"stdout_offset"`
	StderrOffset     int64  `json:"stderr_offset"`
	NextStdoutOffset int64  `json:"next_stdout_offset" jsonschema:"pass as stdout_offset to read on from here"`
	NextStderrOffset int64  `json:"next_stderr_offset" jsonschema:"pass as stderr_offset to read on from here"`
	Missed           int64  `json:"missed,omitempty" jsonschema:"bytes between the offsets asked for and those returned that the sandbox no longer keeps"`
	ExitCode         *int   `json:"exit_code,omitempty"`
	Reason           string `json:"reason,omitempty"`
	Message          string `json:"message,omitempty"`
}

// ProcessListInput is the input of process_list.
type ProcessListInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ProcessEntry describes a background process.
type ProcessEntry struct {
	PID      string    `json:"pid"`
	Argv     []string  `json:"argv"`
	Started  time.Time `json:"started"`
	Running  bool      `json:"running"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Message  string    `json:"message,omitempty"`
}

// ProcessListOutput is the result of process_list.
type ProcessListOutput struct {
	SandboxID string         `json:"sandbox_id"`
	Processes []ProcessEntry `json:"processes"`
}

// OKOutput is the result of a tool that only acts.
type OKOutput struct {
	SandboxID string `json:"sandbox_id"`
	OK        bool   `json:"ok"`
}

// seconds turns a timeout in seconds into a duration.
func seconds(name string, v float64) (time.Duration, error) {
	if math.IsNaN(v) || v < 0 || v > 24*3600 {
		return 0, toolError("%s %v: give seconds between 0 and 86400", name, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// language maps the names agents use to those airlock runs.
func language(l string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(l)) {
	case "", "python", "python3", "py":
		return "python", nil
	case "bash", "shell":
		return "bash", nil
	case "sh":
		return "sh", nil
	}
	return "", toolError("language %q is not supported: use python, bash or sh", l)
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return toolError("environment variable %q: names cannot be empty or hold '=' or NUL", k)
		}
	}
	return nil
}

var (
	execAnnotations = &sdk.ToolAnnotations{DestructiveHint: ptr(true)}
	readOnly        = &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
)

func (s *Server) addExecTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "run_code",
		Title:       "Run code",
		Description: "Run a program (Python, bash or sh) in the sandbox and return its exit code, stdout and stderr. State between calls is kept in files, not in memory.",
		Annotations: execAnnotations,
	}, s.runCode)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "run_command",
		Title:       "Run a command",
		Description: "Run a shell command in the sandbox (in /workspace unless cwd says otherwise). In the foreground it returns exit code, stdout and stderr; with background true it returns a pid at once.",
		Annotations: execAnnotations,
	}, s.runCommand)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "run_python_code",
		Title:       "Run Python code",
		Description: "Run a Python program in the sandbox (same as run_code with language python); global_variables are defined first.",
		Annotations: execAnnotations,
	}, s.runPythonCode)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "execute_code",
		Title:       "Execute code",
		Description: "Run a program in the sandbox (same as run_code; timeout in seconds, default 30).",
		Annotations: execAnnotations,
	}, s.executeCode)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "execute",
		Title:       "Execute a shell command",
		Description: "Run a shell command in the sandbox (same as run_command in the foreground).",
		Annotations: execAnnotations,
	}, s.execute)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "process_list",
		Title:       "List background processes",
		Description: "List the background processes of the sandbox, running and recently ended.",
		Annotations: readOnly,
	}, s.processList)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "process_wait",
		Title:       "Wait for a background process",
		Description: "Wait up to timeout_s for a background process to end; once it has, return its exit code and output.",
		Annotations: readOnly,
	}, s.processWait)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "process_output",
		Title:       "Read a process's output so far",
		Description: "Return what a background process printed from the given offsets on, without waiting for it to end (or waiting up to wait_s for something new): to watch a server's log, or the screen of a program run with pty. Pass next_stdout_offset and next_stderr_offset back to read only what is new.",
		Annotations: readOnly,
	}, s.processOutput)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "process_kill",
		Title:       "Kill a background process",
		Description: "Send a signal to a background process (SIGKILL by default, which ends everything it started).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.processKill)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "process_send_input",
		Title:       "Send input to a background process",
		Description: "Write text to the standard input of a background process started by run_command with background true.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.processSendInput)
}

func (s *Server) runCode(ctx context.Context, req *sdk.CallToolRequest, in RunCodeInput) (*sdk.CallToolResult, ExecOutput, error) {
	lang, err := language(in.Language)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	timeout, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if err := checkEnv(in.Env); err != nil {
		return nil, ExecOutput{}, err
	}
	return s.exec(ctx, req, in.SandboxID, ExecRequest{Code: in.Code, Language: lang, Env: in.Env, Timeout: timeout}, nil)
}

func (s *Server) runPythonCode(ctx context.Context, req *sdk.CallToolRequest, in RunPythonCodeInput) (*sdk.CallToolResult, ExecOutput, error) {
	code := in.PythonCode
	if len(in.GlobalVariables) > 0 {
		b, err := json.Marshal(in.GlobalVariables)
		if err != nil {
			return nil, ExecOutput{}, toolError("global_variables: %v", err)
		}
		// strconv.Quote's escapes are valid in a Python string literal.
		code = "globals().update(__import__('json').loads(" + strconv.Quote(string(b)) + "))\n" + code
	}
	return s.exec(ctx, req, in.SandboxID, ExecRequest{Code: code, Language: "python"}, nil)
}

func (s *Server) executeCode(ctx context.Context, req *sdk.CallToolRequest, in ExecuteCodeInput) (*sdk.CallToolResult, ExecOutput, error) {
	lang, err := language(in.Language)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	timeout, err := seconds("timeout", in.Timeout)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	var notes []string
	if len(in.Libraries) > 0 {
		notes = append(notes, fmt.Sprintf("libraries %v were not installed: the sandbox has no package index; only what its template has is available", in.Libraries))
	}
	return s.exec(ctx, req, in.SandboxID, ExecRequest{Code: in.Code, Language: lang, Timeout: timeout}, notes)
}

func (s *Server) execute(ctx context.Context, req *sdk.CallToolRequest, in ExecuteInput) (*sdk.CallToolResult, ExecOutput, error) {
	timeout, err := seconds("timeout", in.Timeout)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, ExecOutput{}, toolError("command is empty")
	}
	return s.exec(ctx, req, in.SandboxID, ExecRequest{Argv: []string{"sh", "-c", in.Command}, Timeout: timeout}, nil)
}

func (s *Server) runCommand(ctx context.Context, req *sdk.CallToolRequest, in RunCommandInput) (*sdk.CallToolResult, ExecOutput, error) {
	timeout, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if err := checkEnv(in.Env); err != nil {
		return nil, ExecOutput{}, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, ExecOutput{}, toolError("command is empty")
	}
	argv := []string{"sh", "-c", in.Command}
	if len(in.Args) > 0 {
		argv = append([]string{in.Command}, in.Args...)
	}
	er := ExecRequest{Argv: argv, Dir: in.Cwd, Env: in.Env, Stdin: []byte(in.Stdin), Timeout: timeout, PTY: in.PTY, RollbackOnFailure: in.RollbackOnFailure}
	if in.Background && in.RollbackOnFailure {
		return nil, ExecOutput{}, toolError("rollback_on_failure applies to commands run to their end, not to background ones")
	}
	if !in.Background {
		return s.exec(ctx, req, in.SandboxID, er, nil)
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	p, err := t.b.Start(ctx, t.id, er, true)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	out := ExecOutput{SandboxID: t.id, PID: p.ID, Running: true}
	text := fmt.Sprintf("started in the background in sandbox %s: pid %s (standard input stays open for process_send_input; process_output shows its output so far, process_wait its end)", t.id, p.ID)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, out, nil
}

// exec runs er to its end and reports it.
func (s *Server) exec(ctx context.Context, req *sdk.CallToolRequest, sandboxID string, er ExecRequest, notes []string) (*sdk.CallToolResult, ExecOutput, error) {
	t, err := s.resolve(ctx, req, sandboxID)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	r, err := t.b.Exec(ctx, t.id, er)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	res, out := report(t.id, r.Result, r.Stdout, r.Stderr, notes)
	return res, out, nil
}

// report makes the result of an ended command: the text (status line,
// notes, framed output) and the structured output. A command that did not
// exit 0 is a result with isError.
func report(id string, r sandbox.Result, stdout, stderr []byte, notes []string) (*sdk.CallToolResult, ExecOutput) {
	out := ExecOutput{
		SandboxID: id, ExitCode: r.ExitCode, Reason: string(r.Reason), Signal: r.Signal, Message: r.Message,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, WallMS: r.Usage.WallMS, Notes: notes,
		Rollback: r.Rollback,
	}
	for _, l := range r.LimitsHit {
		out.LimitsHit = append(out.LimitsHit, string(l))
	}
	var cut bool
	out.Stdout, cut = clip(stdout)
	out.StdoutTruncated = out.StdoutTruncated || cut
	out.Stderr, cut = clip(stderr)
	out.StderrTruncated = out.StderrTruncated || cut

	var b strings.Builder
	switch r.Reason {
	case sandbox.ReasonExit, "":
		fmt.Fprintf(&b, "exit code %d", r.ExitCode)
	case sandbox.ReasonDenied:
		fmt.Fprintf(&b, "denied by policy: it did not run")
	default:
		fmt.Fprintf(&b, "stopped: %s", r.Reason)
		if r.Signal != "" {
			fmt.Fprintf(&b, " (%s)", r.Signal)
		}
	}
	if r.Message != "" {
		fmt.Fprintf(&b, ": %s", escape(r.Message))
	}
	fmt.Fprintf(&b, " — %d ms, sandbox %s\n", r.Usage.WallMS, id)
	if len(r.LimitsHit) > 0 {
		fmt.Fprintf(&b, "limits hit: %s\n", strings.Join(out.LimitsHit, ", "))
	}
	if rb := r.Rollback; rb != nil {
		switch {
		case rb.Error != "":
			fmt.Fprintf(&b, "rollback failed: %s\n", escape(rb.Error))
		case rb.RolledBack:
			fmt.Fprintf(&b, "rolled back (%s): /workspace is as before the command; undid %d added, %d changed, %d removed files\n", rb.Why, rb.Added, rb.Changed, rb.Removed)
		default:
			fmt.Fprintf(&b, "no rollback: the command succeeded; its changes are kept\n")
		}
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	f := newFramer(stdout, stderr)
	b.WriteString(f.note() + "\n")
	f.frame(&b, "stdout", stdout, r.StdoutTruncated)
	f.frame(&b, "stderr", stderr, r.StderrTruncated)
	res := &sdk.CallToolResult{
		Content: []sdk.Content{&sdk.TextContent{Text: b.String()}},
		IsError: r.ExitCode != 0 || (r.Reason != sandbox.ReasonExit && r.Reason != ""),
	}
	return res, out
}

func (s *Server) processList(ctx context.Context, req *sdk.CallToolRequest, in ProcessListInput) (*sdk.CallToolResult, ProcessListOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ProcessListOutput{}, s.fail(t, err)
	}
	ps, err := t.b.Processes(ctx, t.id)
	if err != nil {
		return nil, ProcessListOutput{}, s.fail(t, err)
	}
	out := ProcessListOutput{SandboxID: t.id, Processes: []ProcessEntry{}}
	for _, p := range ps {
		if !p.Background {
			continue // the commands run_command ran to their end
		}
		e := ProcessEntry{PID: p.ID, Argv: p.Argv, Started: p.Started, Running: p.Running}
		if e.Argv == nil {
			e.Argv = []string{}
		}
		if p.Result != nil {
			e.ExitCode, e.Reason, e.Message = ptr(p.Result.ExitCode), string(p.Result.Reason), p.Result.Message
		}
		out.Processes = append(out.Processes, e)
	}
	return nil, out, nil
}

func (s *Server) processWait(ctx context.Context, req *sdk.CallToolRequest, in ProcessWaitInput) (*sdk.CallToolResult, ExecOutput, error) {
	if in.TimeoutS == 0 {
		in.TimeoutS = 10
	}
	d, err := seconds("timeout_s", min(in.TimeoutS, 300))
	if err != nil {
		return nil, ExecOutput{}, err
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	p, err := t.b.Wait(ctx, t.id, in.PID, d)
	if err != nil {
		return nil, ExecOutput{}, s.fail(t, err)
	}
	if p.Running || p.Result == nil {
		text := fmt.Sprintf("process %s is still running after %v; call process_wait again, or process_kill", in.PID, d)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, ExecOutput{SandboxID: t.id, PID: p.ID, Running: true}, nil
	}
	res, out := report(t.id, *p.Result, p.Stdout, p.Stderr, nil)
	out.PID = p.ID
	return res, out, nil
}

func (s *Server) processOutput(ctx context.Context, req *sdk.CallToolRequest, in ProcessOutputInput) (*sdk.CallToolResult, ProcessOutputOutput, error) {
	wait, err := seconds("wait_s", min(in.WaitS, 60))
	if err != nil {
		return nil, ProcessOutputOutput{}, err
	}
	if in.StdoutOffset < 0 || in.StderrOffset < 0 {
		return nil, ProcessOutputOutput{}, toolError("offsets cannot be negative")
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ProcessOutputOutput{}, s.fail(t, err)
	}
	deadline := time.Now().Add(wait)
	var p ProcessInfo
	for {
		if p, err = t.b.Output(ctx, t.id, in.PID, in.StdoutOffset, in.StderrOffset); err != nil {
			return nil, ProcessOutputOutput{}, s.fail(t, err)
		}
		if len(p.Stdout) > 0 || len(p.Stderr) > 0 || !p.Running || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ProcessOutputOutput{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	out := ProcessOutputOutput{
		SandboxID: t.id, PID: p.ID, Running: p.Running,
		StdoutOffset: p.StdoutOffset, StderrOffset: p.StderrOffset,
		NextStdoutOffset: p.StdoutOffset + int64(len(p.Stdout)), NextStderrOffset: p.StderrOffset + int64(len(p.Stderr)),
		Missed: max(0, p.StdoutOffset-in.StdoutOffset) + max(0, p.StderrOffset-in.StderrOffset),
	}
	out.Stdout, _ = clip(p.Stdout)
	out.Stderr, _ = clip(p.Stderr)
	var b strings.Builder
	if p.Running {
		fmt.Fprintf(&b, "process %s is running", p.ID)
	} else if r := p.Result; r != nil {
		out.ExitCode, out.Reason, out.Message = ptr(r.ExitCode), string(r.Reason), r.Message
		fmt.Fprintf(&b, "process %s has ended: %s, exit code %d", p.ID, r.Reason, r.ExitCode)
	}
	fmt.Fprintf(&b, "; %d new bytes of stdout, %d of stderr", len(p.Stdout), len(p.Stderr))
	if out.Missed > 0 {
		fmt.Fprintf(&b, " (%d bytes before them are no longer kept)", out.Missed)
	}
	fmt.Fprintf(&b, "; read on with stdout_offset=%d, stderr_offset=%d\n", out.NextStdoutOffset, out.NextStderrOffset)
	f := newFramer(p.Stdout, p.Stderr)
	b.WriteString(f.note() + "\n")
	f.frame(&b, "stdout", p.Stdout, false)
	f.frame(&b, "stderr", p.Stderr, false)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

// parseSignal reads process_kill's signal: a name or a number, as the API
// takes them; empty means SIGKILL.
func parseSignal(v string) (syscall.Signal, error) {
	if v == "" {
		return syscall.SIGKILL, nil
	}
	sig, err := sandbox.ParseSignal(v)
	if err != nil {
		return 0, toolError("%s", strings.TrimPrefix(err.Error(), sandbox.ErrInvalid.Error()+": "))
	}
	return sig, nil
}

func (s *Server) processKill(ctx context.Context, req *sdk.CallToolRequest, in ProcessKillInput) (*sdk.CallToolResult, OKOutput, error) {
	sig, err := parseSignal(in.Signal)
	if err != nil {
		return nil, OKOutput{}, err
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, OKOutput{}, s.fail(t, err)
	}
	if err := t.b.Signal(ctx, t.id, in.PID, sig); err != nil {
		return nil, OKOutput{}, s.fail(t, err)
	}
	return nil, OKOutput{SandboxID: t.id, OK: true}, nil
}

func (s *Server) processSendInput(ctx context.Context, req *sdk.CallToolRequest, in ProcessSendInputInput) (*sdk.CallToolResult, OKOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, OKOutput{}, s.fail(t, err)
	}
	if err := t.b.WriteStdin(ctx, t.id, in.PID, []byte(in.Data), in.EOF); err != nil {
		return nil, OKOutput{}, s.fail(t, err)
	}
	return nil, OKOutput{SandboxID: t.id, OK: true}, nil
}
