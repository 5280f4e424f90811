package mcp

import (
	"context"
	"fmt"
	"path"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The export tool: sandbox_export stores a sandbox's files in the
// daemon's object store.

// ExportInput is the input of sandbox_export.
type ExportInput struct {
	Path      string `json:"path" jsonschema:"the file or directory to export (relative to /workspace, or absolute)"`
	To        string `json:"to" jsonschema:"where: s3://BUCKET/PREFIX/ (a directory's files go under it at their paths; a file under it with its name), or s3://BUCKET/KEY for one file"`
	ExecID    string `json:"exec_id,omitempty" jsonschema:"the exec the files come from, named in the objects' metadata"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: this session's own)"`
}

// ExportOutput lists what was stored.
type ExportOutput struct {
	SandboxID string                  `json:"sandbox_id"`
	Objects   []client.ExportedObject `json:"objects"`
	Bytes     int64                   `json:"bytes"`
	Skipped   []string                `json:"skipped,omitempty"`
}

func (s *Server) addExportTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "sandbox_export",
		Title: "Export files to the object store",
		Description: "Store a file, or every regular file of a directory, of the sandbox in the object store (S3) so that it outlives the sandbox. " +
			"Each file's type is found from its bytes (its name does not count) and must be one the sandbox's template allows; each file must fit its size limit. " +
			"All or nothing: when one file is refused, nothing is stored. Returns each object's s3:// URL, type and SHA-256 (and a download URL when the operator enabled them).",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
	}, s.sandboxExport)
}

func (s *Server) sandboxExport(ctx context.Context, req *sdk.CallToolRequest, in ExportInput) (*sdk.CallToolResult, ExportOutput, error) {
	if in.Path == "" || !strings.HasPrefix(in.To, "s3://") {
		return nil, ExportOutput{}, toolError("give path (a file or directory of the sandbox) and to (s3://BUCKET/PREFIX/)")
	}
	p := in.Path
	if !strings.HasPrefix(p, "/") {
		p = path.Join("/workspace", p)
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ExportOutput{}, s.fail(t, err)
	}
	r, err := t.b.Export(ctx, t.id, client.ExportRequest{Path: p, To: in.To, Exec: in.ExecID})
	if err != nil {
		return nil, ExportOutput{}, s.fail(t, err)
	}
	out := ExportOutput{SandboxID: t.id, Objects: r.Objects, Bytes: r.Bytes, Skipped: r.Skipped}
	if out.Objects == nil {
		out.Objects = []client.ExportedObject{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "exported %d file(s), %d bytes, from sandbox %s:\n", len(r.Objects), r.Bytes, t.id)
	for _, o := range r.Objects {
		fmt.Fprintf(&b, "%s (%s, %d bytes, sha256 %s)\n", o.Object, o.ContentType, o.Size, o.SHA256)
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&b, "skipped (not regular files): %s\n", strings.Join(r.Skipped, ", "))
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

// Export stores a sandbox's files in the object store.
func (l *Local) Export(ctx context.Context, id string, req client.ExportRequest) (*client.ExportResult, error) {
	res, err := l.Sup.Export(ctx, l.Caller, supervisor.ExportRequest{Sandbox: id, Path: req.Path, To: req.To, Exec: req.Exec})
	if err != nil {
		return nil, err
	}
	out := &client.ExportResult{Bytes: res.Bytes, Skipped: res.Skipped}
	for _, o := range res.Objects {
		out.Objects = append(out.Objects, client.ExportedObject{Path: o.Path, Object: o.Object, Size: o.Size, ContentType: o.ContentType, SHA256: o.SHA256, URL: o.URL, Expires: o.Expires})
	}
	return out, nil
}

// Export stores a sandbox's files in the daemon's object store.
func (r *Remote) Export(ctx context.Context, id string, req client.ExportRequest) (*client.ExportResult, error) {
	return r.C.Export(ctx, id, req)
}
