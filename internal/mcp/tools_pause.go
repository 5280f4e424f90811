package mcp

import (
	"context"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// PauseBackend is a Backend that can pause and resume sandboxes (Local and
// Remote are).
type PauseBackend interface {
	// Pause pauses a sandbox: its processes and memory kept, no CPU used.
	Pause(ctx context.Context, id string) (SandboxInfo, error)
	// Resume brings a paused sandbox back where it stopped.
	Resume(ctx context.Context, id string) (SandboxInfo, error)
}

var (
	_ PauseBackend = (*Local)(nil)
	_ PauseBackend = (*Remote)(nil)
)

// Pause pauses a sandbox.
func (l *Local) Pause(ctx context.Context, id string) (SandboxInfo, error) {
	in, err := l.Sup.Pause(ctx, l.Caller, id)
	return localInfo(in), err
}

// Resume resumes a paused sandbox.
func (l *Local) Resume(ctx context.Context, id string) (SandboxInfo, error) {
	in, err := l.Sup.Resume(ctx, l.Caller, id)
	return localInfo(in), err
}

// Pause pauses a sandbox.
func (r *Remote) Pause(ctx context.Context, id string) (SandboxInfo, error) {
	s, err := r.C.PauseSandbox(ctx, id)
	if err != nil {
		return SandboxInfo{}, err
	}
	return remoteInfo(s), nil
}

// Resume resumes a paused sandbox.
func (r *Remote) Resume(ctx context.Context, id string) (SandboxInfo, error) {
	s, err := r.C.ResumeSandbox(ctx, id)
	if err != nil {
		return SandboxInfo{}, err
	}
	return remoteInfo(s), nil
}

func (s *Server) addPauseTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_pause",
		Title:       "Pause a sandbox",
		Description: "Pause a sandbox: its processes, their memory and its files are kept, and it uses no CPU until sandbox_resume; its timeout waits meanwhile. Other calls on it fail while it is paused. Without sandbox_id, this session's own sandbox.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, s.sandboxPause)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_resume",
		Title:       "Resume a sandbox",
		Description: "Resume a paused sandbox where it stopped: its processes and their memory as they were (connections to the outside are closed). A running sandbox is left as it is.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sandboxResume)
}

func (s *Server) sandboxPause(ctx context.Context, req *sdk.CallToolRequest, in SandboxIDInput) (*sdk.CallToolResult, SandboxEntry, error) {
	return s.pauseOrResume(ctx, req, in, "paused", PauseBackend.Pause)
}

func (s *Server) sandboxResume(ctx context.Context, req *sdk.CallToolRequest, in SandboxIDInput) (*sdk.CallToolResult, SandboxEntry, error) {
	return s.pauseOrResume(ctx, req, in, "resumed", PauseBackend.Resume)
}

func (s *Server) pauseOrResume(ctx context.Context, req *sdk.CallToolRequest, in SandboxIDInput, done string, do func(PauseBackend, context.Context, string) (SandboxInfo, error)) (*sdk.CallToolResult, SandboxEntry, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	pb, ok := t.b.(PauseBackend)
	if !ok {
		return nil, SandboxEntry{}, s.fail(t, &sandbox.UnsupportedError{What: "pause", Why: "this MCP server's backend cannot pause sandboxes"})
	}
	info, err := do(pb, ctx, t.id)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	e := entry(info)
	e.Session = t.box != nil
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("sandbox %s %s (state %s)", info.ID, done, info.State)}}}, e, nil
}
