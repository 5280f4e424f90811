package client

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/url"
	"strconv"
	"time"
)

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name    string      `json:"name"`
	Path    string      `json:"path"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	ModTime time.Time   `json:"mod_time"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// Target is where a symlink points.
	Target string `json:"target,omitempty"`
}

func pathQuery(p string) url.Values { return url.Values{"path": {p}} }

// ReadFile returns the file at path (absolute inside the sandbox, or
// relative to /workspace).
func (c *Client) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	var b bytes.Buffer
	if err := c.ReadFileTo(ctx, id, path, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadFileTo copies the file at path to w.
func (c *Client) ReadFileTo(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "files"), query: pathQuery(path)})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// WriteFile creates or replaces the file at path with what r holds.
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) error {
	q := pathQuery(path)
	q.Set("mode", strconv.FormatUint(uint64(mode.Perm()), 8))
	return c.call(ctx, request{method: "PUT", path: sandboxPath(id, "files"), query: q, body: r, contentType: "application/octet-stream"}, nil)
}

// ListFiles lists the directory at path.
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]FileInfo, error) {
	var out struct {
		Entries []FileInfo `json:"entries"`
	}
	err := c.call(ctx, request{method: "GET", path: sandboxPath(id, "files", "list"), query: pathQuery(path)}, &out)
	return out.Entries, err
}

// Stat describes the file at path without following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (*FileInfo, error) {
	var fi FileInfo
	return &fi, c.call(ctx, request{method: "GET", path: sandboxPath(id, "files", "stat"), query: pathQuery(path)}, &fi)
}

// Mkdir creates the directory at path and its missing parents.
func (c *Client) Mkdir(ctx context.Context, id, path string, mode fs.FileMode) error {
	body := map[string]string{"path": path, "mode": strconv.FormatUint(uint64(mode.Perm()), 8)}
	return c.call(ctx, request{method: "POST", path: sandboxPath(id, "files", "mkdir"), json: body}, nil)
}

// Move renames from to to.
func (c *Client) Move(ctx context.Context, id, from, to string) error {
	body := map[string]string{"from": from, "to": to}
	return c.call(ctx, request{method: "POST", path: sandboxPath(id, "files", "move"), json: body}, nil)
}

// Remove removes the file or directory tree at path.
func (c *Client) Remove(ctx context.Context, id, path string) error {
	return c.call(ctx, request{method: "DELETE", path: sandboxPath(id, "files"), query: pathQuery(path)}, nil)
}

// DownloadArchive writes the file or directory tree at path (empty:
// /workspace) to w as a tar archive.
func (c *Client) DownloadArchive(ctx context.Context, id, path string, w io.Writer) error {
	q := url.Values{}
	if path != "" {
		q = pathQuery(path)
	}
	resp, err := c.do(ctx, request{method: "GET", path: sandboxPath(id, "archive"), query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// ArchiveResult says what an upload extracted.
type ArchiveResult struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// UploadArchive extracts the tar archive r into the directory at path
// (empty: /workspace). Entries that would escape it, links, devices and
// oversized files are refused (code "archive_refused").
func (c *Client) UploadArchive(ctx context.Context, id, path string, r io.Reader) (*ArchiveResult, error) {
	q := url.Values{}
	if path != "" {
		q = pathQuery(path)
	}
	var res ArchiveResult
	return &res, c.call(ctx, request{method: "PUT", path: sandboxPath(id, "archive"), query: q, body: r, contentType: "application/x-tar"}, &res)
}
