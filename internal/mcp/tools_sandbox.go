package mcp

import (
	"context"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// SandboxCreateInput is the input of sandbox_create.
type SandboxCreateInput struct {
	Template string            `json:"template,omitempty" jsonschema:"the template to make it from (default: default)"`
	TimeoutS float64           `json:"timeout_s,omitempty" jsonschema:"its lifetime in seconds (default: the template's)"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables every command sees"`
}

// SandboxIDInput names a sandbox.
type SandboxIDInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// SandboxSetTimeoutInput is the input of sandbox_set_timeout.
type SandboxSetTimeoutInput struct {
	TimeoutS  float64 `json:"timeout_s" jsonschema:"the sandbox ends this many seconds from now"`
	SandboxID string  `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// SandboxEntry describes a sandbox.
type SandboxEntry struct {
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	State     string    `json:"state" jsonschema:"creating, pooled, running, paused, destroyed or lost"`
	Created   time.Time `json:"created"`
	ExpiresAt time.Time `json:"expires_at"`
	EndReason string    `json:"end_reason,omitempty"`
	// Session says it is this MCP session's own sandbox.
	Session bool `json:"session,omitempty" jsonschema:"this session's own sandbox, used when sandbox_id is left out"`
}

// SandboxListOutput is the result of sandbox_list.
type SandboxListOutput struct {
	Sandboxes []SandboxEntry `json:"sandboxes"`
}

func entry(in SandboxInfo) SandboxEntry {
	return SandboxEntry{SandboxID: in.ID, Template: in.Template, State: in.State, Created: in.Created, ExpiresAt: in.ExpiresAt, EndReason: in.EndReason}
}

func (s *Server) addSandboxTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_create",
		Title:       "Create a sandbox",
		Description: "Make a new sandbox and return its sandbox_id; pass it to other tools to use it instead of this session's own sandbox. It lives until sandbox_kill or its timeout.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.sandboxCreate)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_list",
		Title:       "List sandboxes",
		Description: "List the sandboxes this caller may use, live and recently ended.",
		Annotations: readOnly,
	}, s.sandboxList)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_kill",
		Title:       "Kill a sandbox",
		Description: "Destroy a sandbox and everything in it. Without sandbox_id, this session's own sandbox (the next call makes a fresh one).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sandboxKill)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_set_timeout",
		Title:       "Set a sandbox's timeout",
		Description: "Make the sandbox end timeout_s seconds from now (longer or shorter than before, up to the template's maximum).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sandboxSetTimeout)
	s.addPauseTools()
	s.addLiveForkTools()
}

func (s *Server) sandboxCreate(ctx context.Context, req *sdk.CallToolRequest, in SandboxCreateInput) (*sdk.CallToolResult, SandboxEntry, error) {
	ttl, err := seconds("timeout_s", in.TimeoutS)
	if err != nil {
		return nil, SandboxEntry{}, err
	}
	if err := checkEnv(in.Env); err != nil {
		return nil, SandboxEntry{}, err
	}
	b, err := s.opts.Backend(ctx, req)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(target{}, err)
	}
	info, err := b.Create(ctx, CreateRequest{Template: in.Template, TTL: ttl, Env: in.Env})
	if err != nil {
		return nil, SandboxEntry{}, s.fail(target{}, err)
	}
	return nil, entry(info), nil
}

// sessionID returns the id of the session's sandbox, or "".
func (s *Server) sessionID(ss *sdk.ServerSession) string {
	s.mu.Lock()
	box := s.sessions[ss]
	s.mu.Unlock()
	if box == nil {
		return ""
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	return box.id
}

func (s *Server) sandboxList(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, SandboxListOutput, error) {
	b, err := s.opts.Backend(ctx, req)
	if err != nil {
		return nil, SandboxListOutput{}, s.fail(target{}, err)
	}
	list, err := b.List(ctx)
	if err != nil {
		return nil, SandboxListOutput{}, s.fail(target{}, err)
	}
	mine := s.sessionID(req.Session)
	out := SandboxListOutput{Sandboxes: []SandboxEntry{}}
	for _, in := range list {
		e := entry(in)
		e.Session = mine != "" && in.ID == mine
		out.Sandboxes = append(out.Sandboxes, e)
	}
	return nil, out, nil
}

func (s *Server) sandboxKill(ctx context.Context, req *sdk.CallToolRequest, in SandboxIDInput) (*sdk.CallToolResult, OKOutput, error) {
	if in.SandboxID == "" {
		// The session's own: forget it, so that the next call makes another.
		s.mu.Lock()
		box := s.sessions[req.Session]
		s.mu.Unlock()
		if box == nil || s.sessionID(req.Session) == "" {
			return nil, OKOutput{OK: true}, nil
		}
		box.mu.Lock()
		id := box.id
		box.id = ""
		box.mu.Unlock()
		if err := box.b.Kill(ctx, id); err != nil {
			return nil, OKOutput{}, s.fail(target{}, err)
		}
		return nil, OKOutput{SandboxID: id, OK: true}, nil
	}
	b, err := s.opts.Backend(ctx, req)
	if err != nil {
		return nil, OKOutput{}, s.fail(target{}, err)
	}
	if err := b.Kill(ctx, in.SandboxID); err != nil {
		return nil, OKOutput{}, s.fail(target{}, err)
	}
	return nil, OKOutput{SandboxID: in.SandboxID, OK: true}, nil
}

func (s *Server) sandboxSetTimeout(ctx context.Context, req *sdk.CallToolRequest, in SandboxSetTimeoutInput) (*sdk.CallToolResult, SandboxEntry, error) {
	d, err := seconds("timeout_s", in.TimeoutS)
	if err != nil || d <= 0 {
		return nil, SandboxEntry{}, toolError("timeout_s %v: give a positive number of seconds", in.TimeoutS)
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	info, err := t.b.SetTimeout(ctx, t.id, d)
	if err != nil {
		return nil, SandboxEntry{}, s.fail(t, err)
	}
	e := entry(info)
	e.Session = t.box != nil
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("sandbox %s now ends at %s", info.ID, info.ExpiresAt.Format(time.RFC3339))}}}, e, nil
}
