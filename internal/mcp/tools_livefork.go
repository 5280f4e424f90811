package mcp

import (
	"context"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// LiveForkBackend is a Backend that can copy running sandboxes (Local
// and Remote are).
type LiveForkBackend interface {
	// LiveFork copies running sandbox id, its processes and memory, into
	// count new running sandboxes.
	LiveFork(ctx context.Context, id string, count int) ([]SandboxInfo, error)
}

var (
	_ LiveForkBackend = (*Local)(nil)
	_ LiveForkBackend = (*Remote)(nil)
)

// LiveFork copies a running sandbox.
func (l *Local) LiveFork(ctx context.Context, id string, count int) ([]SandboxInfo, error) {
	res, err := l.Sup.LiveFork(ctx, l.Caller, supervisor.LiveForkRequest{Sandbox: id, Count: count})
	var out []SandboxInfo
	for _, in := range res.Sandboxes {
		out = append(out, localInfo(in))
	}
	return out, err
}

// LiveFork copies a running sandbox.
func (r *Remote) LiveFork(ctx context.Context, id string, count int) ([]SandboxInfo, error) {
	res, err := r.C.LiveFork(ctx, id, client.LiveForkRequest{Count: count})
	if err != nil {
		return nil, err
	}
	var out []SandboxInfo
	for i := range res.Sandboxes {
		out = append(out, remoteInfo(&res.Sandboxes[i]))
	}
	return out, nil
}

// SandboxForkLiveInput is the input of sandbox_fork_live.
type SandboxForkLiveInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to copy (default: this session's own)"`
	Count     int    `json:"count,omitempty" jsonschema:"how many copies, 1 (default) to 16"`
}

// SandboxForkLiveOutput are the copies.
type SandboxForkLiveOutput struct {
	Sandboxes []SandboxEntry `json:"sandboxes"`
}

func (s *Server) addLiveForkTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "sandbox_fork_live",
		Title: "Copy a running sandbox",
		Description: "Copy a running sandbox, its running processes and their memory (a server, a loaded dataset, an interpreter's variables), into count new running sandboxes, to try several things from the same state; the source runs on. " +
			"Each copy has its own id, host name, machine id and randomness. Use the copies by their sandbox_id. Drivers without live fork refuse it with their reason.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: false, OpenWorldHint: ptr(false)},
	}, s.sandboxForkLive)
}

func (s *Server) sandboxForkLive(ctx context.Context, req *sdk.CallToolRequest, in SandboxForkLiveInput) (*sdk.CallToolResult, SandboxForkLiveOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, SandboxForkLiveOutput{}, s.fail(t, err)
	}
	lb, ok := t.b.(LiveForkBackend)
	if !ok {
		return nil, SandboxForkLiveOutput{}, s.fail(t, &sandbox.UnsupportedError{What: "a live fork", Why: "this MCP server's backend cannot copy sandboxes"})
	}
	infos, err := lb.LiveFork(ctx, t.id, in.Count)
	if err != nil {
		return nil, SandboxForkLiveOutput{}, s.fail(t, err)
	}
	out := SandboxForkLiveOutput{Sandboxes: []SandboxEntry{}}
	var ids []string
	for _, info := range infos {
		out.Sandboxes = append(out.Sandboxes, entry(info))
		ids = append(ids, info.ID)
	}
	text := fmt.Sprintf("sandbox %s copied into %s (running)", t.id, strings.Join(ids, ", "))
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, out, nil
}
