package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The copy-on-write mount tools: sandbox_changes, sandbox_apply_changes,
// sandbox_discard_changes.

// ChangesInput is the input of sandbox_changes.
type ChangesInput struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// ChangesOutput is the result of sandbox_changes.
type ChangesOutput struct {
	SandboxID string            `json:"sandbox_id"`
	Mounts    []client.CowMount `json:"mounts"`
}

// DecideChangesInput is the input of sandbox_apply_changes and
// sandbox_discard_changes.
type DecideChangesInput struct {
	Target    string            `json:"target,omitempty" jsonschema:"the cow mount's path in the sandbox (needed when it has more than one)"`
	Paths     []string          `json:"paths,omitempty" jsonschema:"paths relative to the mount or absolute in the sandbox; a directory stands for all below it; none: every change"`
	Expect    map[string]string `json:"expect,omitempty" jsonschema:"apply only: path to the entry (the change's entry field) sandbox_changes showed, \"\" for a deletion; a change made since (type, mode, size, content or symlink target) is a conflict and nothing is applied"`
	SandboxID string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

func (s *Server) addChangesTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_changes",
		Title:       "Review a sandbox's changes to host directories",
		Description: "List the pending changes of the sandbox's copy-on-write mounts (host directories mounted HOST:PATH:cow): what it added, deleted, modified, chmod-ed or re-linked, with unified diffs of text files (capped), what an apply would refuse and why, and paths the host changed meanwhile (conflicts). Nothing reaches the host until it is applied.",
		Annotations: readOnly,
	}, s.sandboxChanges)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_apply_changes",
		Title:       "Apply a sandbox's changes to a host directory",
		Description: "Write the chosen pending changes of a copy-on-write mount (default: all) to the host directory, each file atomically. When the host changed under one of them since the sandbox started, nothing is applied and the conflicts are listed. Where the daemon's policy says a person must approve, only an operator can apply (the web page's Changes).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.sandboxApplyChanges)
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "sandbox_discard_changes",
		Title:       "Discard a sandbox's changes to a host directory",
		Description: "Drop the chosen pending changes of a copy-on-write mount (default: all): the sandbox sees the host's files there again; the host is not touched.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sandboxDiscardChanges)
}

func (s *Server) sandboxChanges(ctx context.Context, req *sdk.CallToolRequest, in ChangesInput) (*sdk.CallToolResult, ChangesOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ChangesOutput{}, s.fail(t, err)
	}
	mounts, err := t.b.Changes(ctx, t.id)
	if err != nil {
		return nil, ChangesOutput{}, s.fail(t, err)
	}
	out := ChangesOutput{SandboxID: t.id, Mounts: mounts}
	if out.Mounts == nil {
		out.Mounts = []client.CowMount{}
	}
	var b strings.Builder
	if len(mounts) == 0 {
		fmt.Fprintf(&b, "sandbox %s has no copy-on-write mount", t.id)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
	}
	// The paths and the content are the sandbox's: framed as data.
	var txt strings.Builder
	for _, m := range mounts {
		txt.WriteString(cowText(m))
	}
	f := newFramer([]byte(txt.String()))
	for _, m := range mounts {
		fmt.Fprintf(&b, "cow mount %s of sandbox %s (host %s): %d pending changes", m.Target, t.id, m.Source, len(m.Changes))
		if m.Approval {
			b.WriteString("; only an operator may apply or discard them")
		}
		b.WriteString("\n")
	}
	b.WriteString(f.note() + "\n")
	f.frame(&b, "changes", []byte(txt.String()), false)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

// cowText is a mount's changes as `airlock sandbox changes` shows them.
func cowText(m client.CowMount) string {
	d := snapshot.Diff{From: "host " + m.Source, To: "sandbox " + m.Target}
	var notes strings.Builder
	for _, c := range m.Changes {
		var sc snapshot.Change
		raw, _ := json.Marshal(c.Change)
		_ = json.Unmarshal(raw, &sc)
		d.Add(sc)
		if c.Refused != "" {
			fmt.Fprintf(&notes, "refused  %q: %s\n", c.Path, c.Refused)
		}
		if c.Conflict != "" {
			fmt.Fprintf(&notes, "conflict %q: %s\n", c.Path, c.Conflict)
		}
		if c.Warning != "" {
			fmt.Fprintf(&notes, "warning  %q: %s\n", c.Path, c.Warning)
		}
	}
	d.Truncated = m.Truncated
	return d.Text() + notes.String()
}

func (s *Server) sandboxApplyChanges(ctx context.Context, req *sdk.CallToolRequest, in DecideChangesInput) (*sdk.CallToolResult, client.ApplyResult, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, client.ApplyResult{}, s.fail(t, err)
	}
	res, err := t.b.ApplyChanges(ctx, t.id, client.ChangesRequest{Target: in.Target, Paths: in.Paths, Expect: in.Expect})
	if err != nil {
		return nil, client.ApplyResult{}, s.fail(t, err)
	}
	text := fmt.Sprintf("applied %d change(s) of sandbox %s to the host directory, refused %d", len(res.Applied), t.id, len(res.Refused))
	for _, r := range res.Refused {
		text += fmt.Sprintf("\nrefused %q: %s", r.Path, r.Reason)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, *res, nil
}

func (s *Server) sandboxDiscardChanges(ctx context.Context, req *sdk.CallToolRequest, in DecideChangesInput) (*sdk.CallToolResult, client.DiscardResult, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, client.DiscardResult{}, s.fail(t, err)
	}
	res, err := t.b.DiscardChanges(ctx, t.id, client.ChangesRequest{Target: in.Target, Paths: in.Paths})
	if err != nil {
		return nil, client.DiscardResult{}, s.fail(t, err)
	}
	text := fmt.Sprintf("discarded %d change(s) of sandbox %s", len(res.Discarded), t.id)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, *res, nil
}

// The Local backend's calls: the supervisor's answers in the SDK's wire
// form.

func rewire(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Changes lists a sandbox's cow mounts' pending changes.
func (l *Local) Changes(ctx context.Context, id string) ([]client.CowMount, error) {
	m, err := l.Sup.Changes(ctx, l.Caller, id)
	if err != nil {
		return nil, err
	}
	var out []client.CowMount
	return out, rewire(m, &out)
}

// ApplyChanges applies a sandbox's pending changes.
func (l *Local) ApplyChanges(ctx context.Context, id string, r client.ChangesRequest) (*client.ApplyResult, error) {
	res, err := l.Sup.ApplyChanges(ctx, l.Caller, id, supervisor.CowRequest{Target: r.Target, Paths: r.Paths, Expect: r.Expect})
	if err != nil {
		return nil, err
	}
	var out client.ApplyResult
	return &out, rewire(res, &out)
}

// DiscardChanges discards a sandbox's pending changes.
func (l *Local) DiscardChanges(ctx context.Context, id string, r client.ChangesRequest) (*client.DiscardResult, error) {
	res, err := l.Sup.DiscardChanges(ctx, l.Caller, id, supervisor.CowRequest{Target: r.Target, Paths: r.Paths})
	if err != nil {
		return nil, err
	}
	var out client.DiscardResult
	return &out, rewire(res, &out)
}

// Changes lists a sandbox's cow mounts' pending changes.
func (r *Remote) Changes(ctx context.Context, id string) ([]client.CowMount, error) {
	return r.C.Changes(ctx, id)
}

// ApplyChanges applies a sandbox's pending changes.
func (r *Remote) ApplyChanges(ctx context.Context, id string, req client.ChangesRequest) (*client.ApplyResult, error) {
	return r.C.ApplyChanges(ctx, id, req)
}

// DiscardChanges discards a sandbox's pending changes.
func (r *Remote) DiscardChanges(ctx context.Context, id string, req client.ChangesRequest) (*client.DiscardResult, error) {
	return r.C.DiscardChanges(ctx, id, req)
}
