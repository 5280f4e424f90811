package mcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strconv"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Remote is a Backend that calls a running daemon through the Go SDK.
type Remote struct {
	C *client.Client
}

var _ Backend = (*Remote)(nil)

func remoteInfo(s *client.Sandbox) SandboxInfo {
	return SandboxInfo{ID: s.ID, Template: s.Template, State: s.State, Created: s.CreatedAt, ExpiresAt: s.ExpiresAt, EndReason: s.EndReason}
}

func remoteResult(r client.Result) sandbox.Result {
	out := sandbox.Result{
		ExitCode: r.ExitCode, Signal: r.Signal, Reason: sandbox.Reason(r.Reason), Message: r.Message,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		Usage: sandbox.Usage{WallMS: r.Usage.WallMS, CPUMS: r.Usage.CPUMS, MemoryPeakBytes: r.Usage.MemoryPeakBytes, BytesWritten: r.Usage.BytesWritten},
	}
	for _, l := range r.LimitsHit {
		out.LimitsHit = append(out.LimitsHit, sandbox.Limit(l))
	}
	if rb := r.Rollback; rb != nil {
		out.Rollback = &sandbox.Rollback{RolledBack: rb.RolledBack, Why: rb.Why, Snapshot: rb.Snapshot, Added: rb.Added, Changed: rb.Changed, Removed: rb.Removed, Error: rb.Error}
	}
	return out
}

func remoteProcess(p *client.Process) ProcessInfo {
	out := ProcessInfo{
		ID: p.ID, Argv: p.Argv, Started: p.StartedAt, Running: p.Running, Background: p.Background, PTY: p.PTY != nil,
		Stdout: p.Stdout, Stderr: p.Stderr, StdoutOffset: p.StdoutOffset, StderrOffset: p.StderrOffset,
	}
	if p.Result != nil {
		r := remoteResult(*p.Result)
		out.Result = &r
	}
	return out
}

func (r ExecRequest) client() client.ExecRequest {
	out := client.ExecRequest{Argv: r.Argv, Code: r.Code, Language: r.Language, Env: r.Env, Cwd: r.Dir, Stdin: r.Stdin, Timeout: r.Timeout}
	if r.RollbackOnFailure {
		out.Rollback = client.RollbackOnFailure
	}
	if r.PTY {
		out.PTY = &client.TermSize{Rows: TermRows, Cols: TermCols}
	}
	return out
}

// Create makes a sandbox.
func (r *Remote) Create(ctx context.Context, req CreateRequest) (SandboxInfo, error) {
	s, err := r.C.CreateSandbox(ctx, client.CreateRequest{Template: req.Template, TTL: req.TTL, Env: req.Env})
	if err != nil {
		return SandboxInfo{}, err
	}
	return remoteInfo(s), nil
}

// List describes the key's sandboxes.
func (r *Remote) List(ctx context.Context) ([]SandboxInfo, error) {
	ss, err := r.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]SandboxInfo, 0, len(ss))
	for i := range ss {
		out = append(out, remoteInfo(&ss[i]))
	}
	return out, nil
}

// Kill destroys a sandbox.
func (r *Remote) Kill(ctx context.Context, id string) error { return r.C.DeleteSandbox(ctx, id) }

// SetTimeout sets the sandbox's lifetime to d from now.
func (r *Remote) SetTimeout(ctx context.Context, id string, d time.Duration) (SandboxInfo, error) {
	s, err := r.C.SetTimeout(ctx, id, d)
	if err != nil {
		return SandboxInfo{}, err
	}
	return remoteInfo(s), nil
}

// Exec runs a command to its end.
func (r *Remote) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	res, err := r.C.Exec(ctx, id, req.client())
	if err != nil {
		return ExecResult{}, err
	}
	return ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, Result: remoteResult(res.Result)}, nil
}

// Start starts a background process.
func (r *Remote) Start(ctx context.Context, id string, req ExecRequest, keepStdin bool) (ProcessInfo, error) {
	p, err := r.C.StartProcess(ctx, id, client.StartProcessRequest{ExecRequest: req.client(), KeepStdinOpen: keepStdin})
	if err != nil {
		return ProcessInfo{}, err
	}
	return remoteProcess(p), nil
}

// Output returns what process pid printed from the offsets on.
func (r *Remote) Output(ctx context.Context, id, pid string, stdoutOffset, stderrOffset int64) (ProcessInfo, error) {
	p, err := r.C.ProcessOutput(ctx, id, pid, client.Offsets{Stdout: stdoutOffset, Stderr: stderrOffset})
	if err != nil {
		return ProcessInfo{}, err
	}
	return remoteProcess(p), nil
}

// Processes lists the processes of a sandbox.
func (r *Remote) Processes(ctx context.Context, id string) ([]ProcessInfo, error) {
	ps, err := r.C.ListProcesses(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, 0, len(ps))
	for i := range ps {
		out = append(out, remoteProcess(&ps[i]))
	}
	return out, nil
}

// Wait waits at most d for process pid to end.
func (r *Remote) Wait(ctx context.Context, id, pid string, d time.Duration) (ProcessInfo, error) {
	p, err := r.C.WaitProcess(ctx, id, pid, d)
	if err != nil {
		return ProcessInfo{}, err
	}
	return remoteProcess(p), nil
}

// Signal sends sig to process pid.
func (r *Remote) Signal(ctx context.Context, id, pid string, sig syscall.Signal) error {
	return r.C.Signal(ctx, id, pid, strconv.Itoa(int(sig)))
}

// WriteStdin writes to the standard input of process pid.
func (r *Remote) WriteStdin(ctx context.Context, id, pid string, data []byte, eof bool) error {
	return r.C.WriteStdin(ctx, id, pid, data, eof)
}

// errWindowFull stops a ReadFile once the window is full.
var errWindowFull = errors.New("window full")

// window keeps the bytes of a stream from off, at most limit of them (0:
// no limit).
type window struct {
	off, limit, pos int64
	buf             bytes.Buffer
}

func (w *window) Write(p []byte) (int, error) {
	n := len(p)
	if skip := w.off - w.pos; skip > 0 {
		if int64(len(p)) <= skip {
			w.pos += int64(n)
			return n, nil
		}
		p = p[skip:]
	}
	w.pos += int64(n)
	if w.limit > 0 {
		if room := w.limit - int64(w.buf.Len()); int64(len(p)) >= room {
			w.buf.Write(p[:room])
			return n, errWindowFull
		}
	}
	w.buf.Write(p)
	return n, nil
}

// ReadFile reads part of a file.
func (r *Remote) ReadFile(ctx context.Context, id, path string, offset, limit int64) ([]byte, error) {
	w := &window{off: offset, limit: limit}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := r.C.ReadFileTo(ctx, id, path, w)
	if errors.Is(err, errWindowFull) {
		err = nil
	}
	return w.buf.Bytes(), err
}

// WriteFile creates or replaces a file.
func (r *Remote) WriteFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) error {
	return r.C.WriteFile(ctx, id, path, bytes.NewReader(data), mode)
}

func remoteFile(f client.FileInfo) sandbox.FileInfo {
	return sandbox.FileInfo{Name: f.Name, Path: f.Path, Size: f.Size, Mode: f.Mode, ModTime: f.ModTime, Type: f.Type, Target: f.Target}
}

// ReadDir lists a directory.
func (r *Remote) ReadDir(ctx context.Context, id, path string) ([]sandbox.FileInfo, error) {
	list, err := r.C.ListFiles(ctx, id, path)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.FileInfo, 0, len(list))
	for _, f := range list {
		out = append(out, remoteFile(f))
	}
	return out, nil
}

// Stat describes a file.
func (r *Remote) Stat(ctx context.Context, id, path string) (sandbox.FileInfo, error) {
	f, err := r.C.Stat(ctx, id, path)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	return remoteFile(*f), nil
}

// Mkdir creates a directory and its parents.
func (r *Remote) Mkdir(ctx context.Context, id, path string) error {
	return r.C.Mkdir(ctx, id, path, 0o755)
}

// Remove removes a file or a directory tree.
func (r *Remote) Remove(ctx context.Context, id, path string) error {
	return r.C.Remove(ctx, id, path)
}

// Rename moves from to to.
func (r *Remote) Rename(ctx context.Context, id, from, to string) error {
	return r.C.Move(ctx, id, from, to)
}

var _ io.Writer = (*window)(nil)
