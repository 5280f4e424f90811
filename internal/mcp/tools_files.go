package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Bounds of the file tools.
const (
	maxFileRead     = 8 << 20 // read_file and edit_file read at most this much
	defaultLines    = 2000
	defaultBinBytes = 64 << 10
	maxEntries      = 2000
	maxGlobDirs     = 5000
	maxMatches      = 1000
	maxGrepLine     = 500
)

// ReadFileInput is the input of read_file.
type ReadFileInput struct {
	Path      string `json:"path" jsonschema:"the file (absolute, or relative to /workspace)"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"first line to return, counting from 0 (bytes for a binary file)"`
	Limit     int64  `json:"limit,omitempty" jsonschema:"how many lines to return (default 2000; bytes for a binary file, default 65536)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ReadFileOutput is the result of read_file.
type ReadFileOutput struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8, or base64 for a file that is not text"`
	Offset    int64  `json:"offset"`
	Count     int64  `json:"count" jsonschema:"lines (bytes for base64) returned"`
	Total     int64  `json:"total" jsonschema:"lines (bytes for base64) in the file, as far as read"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"more of the file follows"`
}

// WriteFileInput is the input of write_file.
type WriteFileInput struct {
	Path      string `json:"path" jsonschema:"the file to create or replace (missing parent directories are made)"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// EditFileInput is the input of edit_file.
type EditFileInput struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace; it must occur exactly once unless replace_all is set"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// PathInput names a path.
type PathInput struct {
	Path      string `json:"path" jsonschema:"absolute, or relative to /workspace"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// ListDirectoryInput is the input of list_directory.
type ListDirectoryInput struct {
	Path      string `json:"path,omitempty" jsonschema:"the directory (default /workspace)"`
	Depth     int    `json:"depth,omitempty" jsonschema:"levels to descend (default 1, at most 5)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// DeleteInput is the input of delete.
type DeleteInput struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"also delete a directory that is not empty, with everything in it"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// MoveFileInput is the input of move_file.
type MoveFileInput struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	SandboxID   string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// GlobInput is the input of glob.
type GlobInput struct {
	Pattern   string `json:"pattern" jsonschema:"a pattern like **/*.py: * ? [..] within a name, ** for any number of directories"`
	Path      string `json:"path,omitempty" jsonschema:"where a relative pattern starts (default /workspace)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// GrepInput is the input of grep.
type GrepInput struct {
	Pattern    string `json:"pattern" jsonschema:"the text to look for (a literal unless regex is set)"`
	Path       string `json:"path,omitempty" jsonschema:"file or directory to search (default /workspace)"`
	Glob       string `json:"glob,omitempty" jsonschema:"only files whose name matches, like *.py"`
	MaxCount   int    `json:"max_count,omitempty" jsonschema:"at most this many matches per file"`
	Regex      bool   `json:"regex,omitempty" jsonschema:"pattern is an extended regular expression"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"the sandbox to use (default: this session's own)"`
}

// FileEntry describes a file.
type FileEntry struct {
	Path    string    `json:"path"`
	Name    string    `json:"name"`
	Type    string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode" jsonschema:"permissions, like 0644"`
	ModTime time.Time `json:"mod_time"`
	Target  string    `json:"target,omitempty" jsonschema:"where a symlink points"`
}

// FileOutput is the result of a tool about one file.
type FileOutput struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	// Bytes is the size written (write_file, edit_file).
	Bytes int64 `json:"bytes,omitempty"`
	// Replacements is how many occurrences edit_file replaced.
	Replacements int `json:"replacements,omitempty"`
}

// ListOutput is the result of list_directory and glob.
type ListOutput struct {
	SandboxID string      `json:"sandbox_id"`
	Entries   []FileEntry `json:"entries,omitempty"`
	Matches   []string    `json:"matches,omitempty"`
	Truncated bool        `json:"truncated,omitempty"`
}

// InfoOutput is the result of get_file_info.
type InfoOutput struct {
	SandboxID string `json:"sandbox_id"`
	FileEntry
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepOutput is the result of grep.
type GrepOutput struct {
	SandboxID string      `json:"sandbox_id"`
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated,omitempty"`
}

func fileEntry(dir string, f sandbox.FileInfo) FileEntry {
	p := f.Path
	if dir != "" {
		p = path.Join(dir, f.Name)
	}
	return FileEntry{Path: p, Name: f.Name, Type: f.Type, Size: f.Size, Mode: fmt.Sprintf("%04o", f.Mode.Perm()), ModTime: f.ModTime, Target: f.Target}
}

func (s *Server) addFileTools() {
	noWorld := ptr(false)
	tool := func(name, title, desc string, a *sdk.ToolAnnotations) *sdk.Tool {
		return &sdk.Tool{Name: name, Title: title, Description: desc, Annotations: a}
	}
	sdk.AddTool(s.srv, tool("read_file", "Read a file", "Read a text file of the sandbox, by lines (offset, limit); a file that is not UTF-8 text comes back base64, by bytes.", readOnly), s.readFile)
	sdk.AddTool(s.srv, tool("write_file", "Write a file", "Create or replace a file of the sandbox with content (utf-8 text, or base64 with encoding base64).",
		&sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: noWorld}), s.writeFile)
	sdk.AddTool(s.srv, tool("edit_file", "Edit a file", "Replace old_string with new_string in a text file of the sandbox. Fails when old_string does not occur, or occurs more than once without replace_all.",
		&sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: noWorld}), s.editFile)
	sdk.AddTool(s.srv, tool("list_directory", "List a directory", "List a directory of the sandbox (depth levels deep).", readOnly), s.listDirectory)
	sdk.AddTool(s.srv, tool("get_file_info", "Describe a file", "Describe a file of the sandbox: type, size, mode, modification time, symlink target.", readOnly), s.getFileInfo)
	sdk.AddTool(s.srv, tool("create_directory", "Create a directory", "Create a directory of the sandbox and any missing parents.",
		&sdk.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: noWorld}), s.createDirectory)
	sdk.AddTool(s.srv, tool("move_file", "Move a file", "Move or rename a file or directory of the sandbox (replaces a file at destination).",
		&sdk.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: noWorld}), s.moveFile)
	sdk.AddTool(s.srv, tool("delete", "Delete a file", "Delete a file of the sandbox, or a directory (one that is not empty only with recursive).",
		&sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: noWorld}), s.deletePath)
	sdk.AddTool(s.srv, tool("glob", "Find files", "Find the files of the sandbox whose paths match a pattern (** spans directories).", readOnly), s.glob)
	sdk.AddTool(s.srv, tool("grep", "Search file contents", "Search the files of the sandbox for lines holding a text (or a regular expression); runs grep inside the sandbox.", readOnly), s.grep)
}

func (s *Server) readFile(ctx context.Context, req *sdk.CallToolRequest, in ReadFileInput) (*sdk.CallToolResult, ReadFileOutput, error) {
	if in.Offset < 0 || in.Limit < 0 {
		return nil, ReadFileOutput{}, toolError("offset and limit cannot be negative")
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ReadFileOutput{}, s.fail(t, err)
	}
	fi, err := t.b.Stat(ctx, t.id, in.Path)
	if err != nil {
		return nil, ReadFileOutput{}, s.fail(t, err)
	}
	if fi.Type == "dir" {
		return nil, ReadFileOutput{}, toolError("%s is a directory: use list_directory", in.Path)
	}
	data, err := t.b.ReadFile(ctx, t.id, in.Path, 0, maxFileRead+1)
	if err != nil {
		return nil, ReadFileOutput{}, s.fail(t, err)
	}
	more := len(data) > maxFileRead
	if more {
		data = data[:maxFileRead]
	}
	out := ReadFileOutput{SandboxID: t.id, Path: in.Path, Offset: in.Offset}
	if !utf8.Valid(data) && !(more && utf8.Valid(data[:max(0, len(data)-3)])) {
		limit := in.Limit
		if limit == 0 {
			limit = defaultBinBytes
		}
		start := min(in.Offset, int64(len(data)))
		end := min(start+limit, int64(len(data)))
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data[start:end])
		out.Count, out.Total, out.Truncated = end-start, int64(len(data)), end < int64(len(data)) || more
		text := fmt.Sprintf("%s is not UTF-8 text: bytes %d to %d of %d, base64:\n%s\n", in.Path, start, end, len(data), out.Content)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}, out, nil
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	limit := in.Limit
	if limit == 0 {
		limit = defaultLines
	}
	start := min(in.Offset, int64(len(lines)))
	end := min(start+limit, int64(len(lines)))
	out.Encoding, out.Content = "utf-8", strings.Join(lines[start:end], "")
	out.Count, out.Total, out.Truncated = end-start, int64(len(lines)), end < int64(len(lines)) || more
	content, cut := clip([]byte(out.Content))
	if cut {
		out.Content, out.Truncated = content, true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: lines %d to %d of %d", in.Path, start, end, len(lines))
	if more {
		fmt.Fprintf(&b, " (only the first %d bytes of the file were read)", maxFileRead)
	}
	if out.Truncated {
		b.WriteString("; more follows: read again with a larger offset")
	}
	b.WriteString("\n")
	f := newFramer([]byte(out.Content))
	b.WriteString(f.note() + "\n")
	f.frame(&b, "file", []byte(out.Content), false)
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, out, nil
}

// writeBack writes data to p, keeping the permissions of the file it
// replaces, and making missing parent directories (only missing ones: a
// mkdir of an existing parent is a write the policy judges, and a rule
// allowing writes only below /workspace/ refuses /workspace itself).
func writeBack(ctx context.Context, t target, p string, data []byte) error {
	mode := fs.FileMode(0o644)
	fi, err := t.b.Stat(ctx, t.id, p)
	switch {
	case err == nil && fi.Type == "dir":
		return toolError("%s is a directory", p)
	case err == nil:
		mode = fi.Mode.Perm()
	case errors.Is(err, sandbox.ErrNotFound) || isNotFound(err):
		if dir := path.Dir(p); dir != "." && dir != "/" {
			if _, err := t.b.Stat(ctx, t.id, dir); err != nil {
				if err := t.b.Mkdir(ctx, t.id, dir); err != nil {
					return err
				}
			}
		}
	default:
		return err
	}
	return t.b.WriteFile(ctx, t.id, p, data, mode)
}

func (s *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in WriteFileInput) (*sdk.CallToolResult, FileOutput, error) {
	data := []byte(in.Content)
	switch strings.ToLower(in.Encoding) {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, FileOutput{}, toolError("content is not standard base64: %v", err)
		}
	default:
		return nil, FileOutput{}, toolError("encoding %q: use utf-8 or base64", in.Encoding)
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	if err := writeBack(ctx, t, in.Path, data); err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	return nil, FileOutput{SandboxID: t.id, Path: in.Path, Bytes: int64(len(data))}, nil
}

func (s *Server) editFile(ctx context.Context, req *sdk.CallToolRequest, in EditFileInput) (*sdk.CallToolResult, FileOutput, error) {
	if in.OldString == "" {
		return nil, FileOutput{}, toolError("old_string is empty: give the exact text to replace (use write_file to write a whole file)")
	}
	if in.OldString == in.NewString {
		return nil, FileOutput{}, toolError("old_string and new_string are the same: nothing to change")
	}
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	data, err := t.b.ReadFile(ctx, t.id, in.Path, 0, maxFileRead+1)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	if len(data) > maxFileRead {
		return nil, FileOutput{}, toolError("%s is larger than %d bytes: edit it with run_command", in.Path, maxFileRead)
	}
	if !utf8.Valid(data) {
		return nil, FileOutput{}, toolError("%s is not UTF-8 text", in.Path)
	}
	n := bytes.Count(data, []byte(in.OldString))
	switch {
	case n == 0:
		return nil, FileOutput{}, toolError("old_string does not occur in %s: nothing was changed (read the file and copy the text exactly, whitespace included)", in.Path)
	case n > 1 && !in.ReplaceAll:
		return nil, FileOutput{}, toolError("old_string occurs %d times in %s: nothing was changed; give more surrounding text so that it occurs once, or set replace_all", n, in.Path)
	}
	out := bytes.ReplaceAll(data, []byte(in.OldString), []byte(in.NewString))
	if err := writeBack(ctx, t, in.Path, out); err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	return nil, FileOutput{SandboxID: t.id, Path: in.Path, Bytes: int64(len(out)), Replacements: n}, nil
}

func (s *Server) listDirectory(ctx context.Context, req *sdk.CallToolRequest, in ListDirectoryInput) (*sdk.CallToolResult, ListOutput, error) {
	if !path.IsAbs(in.Path) {
		in.Path = path.Join("/workspace", in.Path)
	}
	depth := in.Depth
	if depth <= 0 {
		depth = 1
	}
	depth = min(depth, 5)
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, ListOutput{}, s.fail(t, err)
	}
	out := ListOutput{SandboxID: t.id, Entries: []FileEntry{}}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		list, err := t.b.ReadDir(ctx, t.id, dir)
		if err != nil {
			return err
		}
		for _, f := range list {
			if len(out.Entries) >= maxEntries {
				out.Truncated = true
				return nil
			}
			e := fileEntry(dir, f)
			out.Entries = append(out.Entries, e)
			if f.Type == "dir" && level < depth {
				if err := walk(e.Path, level+1); err != nil && level == 0 {
					continue // unreadable subdirectories are listed, not entered
				}
			}
		}
		return nil
	}
	if err := walk(in.Path, 1); err != nil {
		return nil, ListOutput{}, s.fail(t, err)
	}
	return nil, out, nil
}

func (s *Server) getFileInfo(ctx context.Context, req *sdk.CallToolRequest, in PathInput) (*sdk.CallToolResult, InfoOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, InfoOutput{}, s.fail(t, err)
	}
	fi, err := t.b.Stat(ctx, t.id, in.Path)
	if err != nil {
		return nil, InfoOutput{}, s.fail(t, err)
	}
	e := fileEntry("", fi)
	if e.Path == "" {
		e.Path = in.Path
	}
	return nil, InfoOutput{SandboxID: t.id, FileEntry: e}, nil
}

func (s *Server) createDirectory(ctx context.Context, req *sdk.CallToolRequest, in PathInput) (*sdk.CallToolResult, FileOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	if err := t.b.Mkdir(ctx, t.id, in.Path); err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	return nil, FileOutput{SandboxID: t.id, Path: in.Path}, nil
}

func (s *Server) moveFile(ctx context.Context, req *sdk.CallToolRequest, in MoveFileInput) (*sdk.CallToolResult, FileOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	if err := t.b.Rename(ctx, t.id, in.Source, in.Destination); err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	return nil, FileOutput{SandboxID: t.id, Path: in.Destination}, nil
}

func (s *Server) deletePath(ctx context.Context, req *sdk.CallToolRequest, in DeleteInput) (*sdk.CallToolResult, FileOutput, error) {
	t, err := s.resolve(ctx, req, in.SandboxID)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	fi, err := t.b.Stat(ctx, t.id, in.Path)
	if err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	if fi.Type == "dir" && !in.Recursive {
		list, err := t.b.ReadDir(ctx, t.id, in.Path)
		if err != nil {
			return nil, FileOutput{}, s.fail(t, err)
		}
		if len(list) > 0 {
			return nil, FileOutput{}, toolError("%s is a directory with %d entries: set recursive to delete it with everything in it", in.Path, len(list))
		}
	}
	if err := t.b.Remove(ctx, t.id, in.Path); err != nil {
		return nil, FileOutput{}, s.fail(t, err)
	}
	return nil, FileOutput{SandboxID: t.id, Path: in.Path}, nil
}
