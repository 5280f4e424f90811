package client

import (
	"context"
	"time"
)

// ExportRequest stores a sandbox's file, or every regular file of a
// directory tree, in the daemon's object store.
type ExportRequest struct {
	// Path is the file or directory in the sandbox.
	Path string `json:"path"`
	// To is s3://BUCKET/KEY for a file (a KEY ending in "/" puts the
	// file's name after it), or s3://BUCKET/PREFIX/ for a directory. The
	// bucket must be one the daemon's config lets exports use.
	To string `json:"to"`
	// Exec names the exec the files come from (object metadata, audit).
	Exec string `json:"exec,omitempty"`
}

// ExportedObject is one stored file.
type ExportedObject struct {
	Path   string `json:"path"`
	Object string `json:"object"` // s3://BUCKET/KEY
	Size   int64  `json:"size"`
	// ContentType is what the file's bytes are (never its name).
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
	// URL downloads the object until Expires, when the daemon presigns.
	URL     string     `json:"url,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

// ExportResult is what an export stored.
type ExportResult struct {
	Objects []ExportedObject `json:"objects"`
	Bytes   int64            `json:"bytes"`
	// Skipped names what a tree held that is not a regular file.
	Skipped []string `json:"skipped,omitempty"`
}

// Export stores files of sandbox id in the object store. A file whose
// bytes are a type the template does not export fails with code
// type_refused (415), one over its export_max with too_large (413), a
// store that is down or refuses the daemon's credentials with
// store_unavailable or store_denied (502); then nothing of the export is
// stored.
func (c *Client) Export(ctx context.Context, id string, req ExportRequest) (*ExportResult, error) {
	var r ExportResult
	return &r, c.call(ctx, request{method: "POST", path: sandboxPath(id, "export"), json: req}, &r)
}
