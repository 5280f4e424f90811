package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Local is a Backend that calls a Supervisor in this process on behalf of
// one caller: the embedded supervisor of `airlock mcp`, or the daemon's own
// for a request to /mcp. The supervisor applies the caller's quotas and
// rate limits, as it does for the HTTP API.
type Local struct {
	Sup    *supervisor.Supervisor
	Caller supervisor.Caller
}

var _ Backend = (*Local)(nil)

func localInfo(in supervisor.Info) SandboxInfo {
	return SandboxInfo{ID: in.ID, Template: in.Template, State: string(in.State), Created: in.Created, ExpiresAt: in.ExpiresAt, EndReason: in.EndReason}
}

// Create makes a sandbox owned by the caller.
func (l *Local) Create(ctx context.Context, req CreateRequest) (SandboxInfo, error) {
	env, err := envList(req.Env)
	if err != nil {
		return SandboxInfo{}, err
	}
	in, err := l.Sup.Create(ctx, l.Caller, supervisor.CreateRequest{Template: req.Template, TTL: req.TTL, Env: env})
	if err != nil {
		return SandboxInfo{}, err
	}
	return localInfo(in), nil
}

// List describes the caller's sandboxes.
func (l *Local) List(ctx context.Context) ([]SandboxInfo, error) {
	ins, err := l.Sup.List(ctx, l.Caller, supervisor.Filter{})
	if err != nil {
		return nil, err
	}
	out := make([]SandboxInfo, 0, len(ins))
	for _, in := range ins {
		out = append(out, localInfo(in))
	}
	return out, nil
}

// Kill destroys a sandbox.
func (l *Local) Kill(ctx context.Context, id string) error { return l.Sup.Kill(ctx, l.Caller, id) }

// SetTimeout sets the sandbox's lifetime to d from now.
func (l *Local) SetTimeout(ctx context.Context, id string, d time.Duration) (SandboxInfo, error) {
	in, err := l.Sup.ExtendTimeout(ctx, l.Caller, id, d)
	if err != nil {
		return SandboxInfo{}, err
	}
	return localInfo(in), nil
}

// envList turns {"K": "V"} into sorted "K=V" entries, refusing names that
// are empty or hold '=' or NUL and values that hold NUL, as the API does.
func envList(m map[string]string) ([]string, error) {
	env := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: environment variable %q: names cannot be empty or hold '=' or NUL, and values cannot hold NUL", sandbox.ErrInvalid, k)
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, nil
}

func (r ExecRequest) supervisor() (supervisor.ExecRequest, error) {
	env, err := envList(r.Env)
	if err != nil {
		return supervisor.ExecRequest{}, err
	}
	out := supervisor.ExecRequest{Argv: r.Argv, Code: r.Code, Language: r.Language, Env: env, Dir: r.Dir, Stdin: r.Stdin, Timeout: r.Timeout}
	if r.RollbackOnFailure {
		out.Rollback = sandbox.RollbackOnFailure
	}
	if r.PTY {
		out.PTY = &sandbox.TermSize{Rows: TermRows, Cols: TermCols}
	}
	return out, nil
}

// Exec runs a command to its end.
func (l *Local) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	var out, errb bytes.Buffer
	sr, err := req.supervisor()
	if err != nil {
		return ExecResult{}, err
	}
	sr.Stdout, sr.Stderr = &out, &errb
	res, err := l.Sup.Exec(ctx, l.Caller, id, sr)
	if err != nil {
		return ExecResult{}, err
	}
	return ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), Result: res}, nil
}

func localProcess(p supervisor.ProcessInfo) ProcessInfo {
	return ProcessInfo{
		ID: p.ID, Argv: p.Argv, Started: p.Started, Running: p.Running, Background: p.Background, PTY: p.PTY != nil, Result: p.Result,
		Stdout: p.Stdout, Stderr: p.Stderr, StdoutOffset: p.StdoutOffset, StderrOffset: p.StderrOffset,
	}
}

// Start starts a background process.
func (l *Local) Start(ctx context.Context, id string, req ExecRequest, keepStdin bool) (ProcessInfo, error) {
	sr, err := req.supervisor()
	if err != nil {
		return ProcessInfo{}, err
	}
	p, err := l.Sup.StartProcess(ctx, l.Caller, id, supervisor.StartRequest{ExecRequest: sr, KeepStdinOpen: keepStdin})
	if err != nil {
		return ProcessInfo{}, err
	}
	return localProcess(p), nil
}

// Output returns what process pid printed from the offsets on.
func (l *Local) Output(ctx context.Context, id, pid string, stdoutOffset, stderrOffset int64) (ProcessInfo, error) {
	p, err := l.Sup.Output(ctx, l.Caller, id, pid, supervisor.Offsets{Stdout: stdoutOffset, Stderr: stderrOffset})
	if err != nil {
		return ProcessInfo{}, err
	}
	return localProcess(p), nil
}

// Processes lists the processes of a sandbox.
func (l *Local) Processes(ctx context.Context, id string) ([]ProcessInfo, error) {
	ps, err := l.Sup.Processes(ctx, l.Caller, id)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, localProcess(p))
	}
	return out, nil
}

// Wait waits at most d for process pid to end.
func (l *Local) Wait(ctx context.Context, id, pid string, d time.Duration) (ProcessInfo, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	p, err := l.Sup.Wait(wctx, l.Caller, id, pid)
	if err == nil {
		return localProcess(p), nil
	}
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return ProcessInfo{}, err
	}
	ps, err := l.Processes(ctx, id)
	if err != nil {
		return ProcessInfo{}, err
	}
	for _, p := range ps {
		if p.ID == pid {
			return p, nil
		}
	}
	return ProcessInfo{}, fmt.Errorf("process %q of sandbox %s: %w", pid, id, sandbox.ErrNotFound)
}

// Signal sends sig to process pid.
func (l *Local) Signal(ctx context.Context, id, pid string, sig syscall.Signal) error {
	return l.Sup.Signal(ctx, l.Caller, id, pid, sig)
}

// WriteStdin writes to the standard input of process pid.
func (l *Local) WriteStdin(ctx context.Context, id, pid string, data []byte, eof bool) error {
	return l.Sup.WriteStdin(ctx, l.Caller, id, pid, data, eof)
}

// files runs fn on the sandbox's file API.
func (l *Local) files(ctx context.Context, id string, fn func(f sandbox.Files) error) error {
	f, done, err := l.Sup.Files(ctx, l.Caller, id)
	if err != nil {
		return err
	}
	defer done()
	return fn(f)
}

// ReadFile reads part of a file.
func (l *Local) ReadFile(ctx context.Context, id, path string, offset, limit int64) ([]byte, error) {
	var b bytes.Buffer
	err := l.files(ctx, id, func(f sandbox.Files) error { return f.ReadFile(ctx, path, offset, limit, &b) })
	return b.Bytes(), err
}

// WriteFile creates or replaces a file.
func (l *Local) WriteFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) error {
	return l.files(ctx, id, func(f sandbox.Files) error {
		return f.WriteFile(ctx, path, bytes.NewReader(data), mode)
	})
}

// ReadDir lists a directory.
func (l *Local) ReadDir(ctx context.Context, id, path string) ([]sandbox.FileInfo, error) {
	var out []sandbox.FileInfo
	err := l.files(ctx, id, func(f sandbox.Files) (err error) {
		out, err = f.ReadDir(ctx, path)
		return err
	})
	return out, err
}

// Stat describes a file.
func (l *Local) Stat(ctx context.Context, id, path string) (sandbox.FileInfo, error) {
	var out sandbox.FileInfo
	err := l.files(ctx, id, func(f sandbox.Files) (err error) {
		out, err = f.Stat(ctx, path)
		return err
	})
	return out, err
}

// Mkdir creates a directory and its parents.
func (l *Local) Mkdir(ctx context.Context, id, path string) error {
	return l.files(ctx, id, func(f sandbox.Files) error { return f.Mkdir(ctx, path, 0o755) })
}

// Remove removes a file or a directory tree.
func (l *Local) Remove(ctx context.Context, id, path string) error {
	return l.files(ctx, id, func(f sandbox.Files) error { return f.Remove(ctx, path) })
}

// Rename moves from to to.
func (l *Local) Rename(ctx context.Context, id, from, to string) error {
	return l.files(ctx, id, func(f sandbox.Files) error { return f.Rename(ctx, from, to) })
}
