package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file is envd's Filesystem service over the sandbox's file API
// (paths resolved inside the sandbox by its agent; writes, moves and
// removals decided by the policy and audited). A relative path is relative
// to the sandbox's home (homeOf).

// maxListed bounds the entries one ListDir answers.
const maxListed = 50000

// homeOf is the home of the sandbox of a request: E2B's /home/user for
// the sandboxes the E2B endpoints made, /workspace for the others.
func homeOf(ctx context.Context) string {
	if t := targetOf(ctx); t != nil {
		return t.home()
	}
	return sandbox.Workspace
}

// home is t's home.
func (t *target) home() string { return sandbox.HomeOf(t.info.Home) }

// absPath checks p as the file API does and makes it absolute, a relative
// path in the home of ctx's sandbox.
func absPath(ctx context.Context, p string) (string, error) {
	if err := api.CheckPath(p); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return "", connect.NewError(connect.CodeInvalidArgument, errors.New(ae.Message))
		}
		return "", err
	}
	if !strings.HasPrefix(p, "/") {
		p = path.Join(homeOf(ctx), p)
	}
	return path.Clean(p), nil
}

// entry is E2B's EntryInfo of a file. Owner and group are left out: the
// file API does not say them.
func entry(fi sandbox.FileInfo) entryInfo {
	e := entryInfo{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: uint32(fi.Mode), Permissions: fi.Mode.String()}
	switch fi.Type {
	case "file":
		e.Type = fileTypeFile
	case "dir":
		e.Type = fileTypeDir
	case "symlink":
		e.Type = fileTypeSymlink
		t := fi.Target
		e.SymlinkTarget = &t
	}
	if !fi.ModTime.IsZero() {
		mt := fi.ModTime.UTC()
		e.ModifiedTime = &mt
	}
	return e
}

// files opens the sandbox's file API for one call.
func (h *Handler) files(ctx context.Context) (sandbox.Files, func(), *target, error) {
	t := targetOf(ctx)
	f, done, err := h.sup.Files(ctx, t.c.sup, t.info.ID)
	if err != nil {
		return nil, nil, nil, h.rpcError(err)
	}
	return f, done, t, nil
}

func (h *Handler) stat(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[entryResponse], error) {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	fi, err := f.Stat(ctx, p)
	if err != nil {
		return nil, h.rpcError(err)
	}
	e := entry(fi)
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

func (h *Handler) listDir(ctx context.Context, req *connect.Request[listDirRequest]) (*connect.Response[listDirResponse], error) {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	depth := int(max(req.Msg.Depth, 1))
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	fi, err := f.Stat(ctx, p)
	if err != nil {
		return nil, h.rpcError(err)
	}
	if fi.Type != "dir" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q is not a directory", truncate(p, 200)))
	}
	out := &listDirResponse{Entries: []entryInfo{}}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := f.ReadDir(ctx, dir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if len(out.Entries) >= maxListed {
				return fmt.Errorf("%w: more than %d entries under %s: list less deep, or a smaller directory", sandbox.ErrLimit, maxListed, p)
			}
			out.Entries = append(out.Entries, entry(e))
			if e.Type == "dir" && level < depth {
				if err := walk(e.Path, level+1); err != nil && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, sandbox.ErrNotFound) {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(out), nil
}

func (h *Handler) makeDir(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[entryResponse], error) {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if fi, err := f.Stat(ctx, p); err == nil {
		if fi.Type == "dir" {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %q already exists", truncate(p, 200)))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q already exists and is not a directory", truncate(p, 200)))
	}
	if err := f.Mkdir(ctx, p, 0o755); err != nil {
		return nil, h.rpcError(err)
	}
	fi, err := f.Stat(ctx, p)
	if err != nil {
		return nil, h.rpcError(err)
	}
	e := entry(fi)
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

func (h *Handler) move(ctx context.Context, req *connect.Request[moveRequest]) (*connect.Response[entryResponse], error) {
	from, err := absPath(ctx, req.Msg.Source)
	if err != nil {
		return nil, err
	}
	to, err := absPath(ctx, req.Msg.Destination)
	if err != nil {
		return nil, err
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := h.ensureParent(ctx, f, to); err != nil {
		return nil, h.rpcError(err)
	}
	if err := f.Rename(ctx, from, to); err != nil {
		return nil, h.rpcError(err)
	}
	fi, err := f.Stat(ctx, to)
	if err != nil {
		return nil, h.rpcError(err)
	}
	e := entry(fi)
	return connect.NewResponse(&entryResponse{Entry: &e}), nil
}

// ensureParent makes p's directory when it is missing, as envd does for
// writes and moves.
func (h *Handler) ensureParent(ctx context.Context, f sandbox.Files, p string) error {
	dir := path.Dir(p)
	if _, err := f.Stat(ctx, dir); err == nil || !errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	return f.Mkdir(ctx, dir, 0o755)
}

func (h *Handler) remove(ctx context.Context, req *connect.Request[pathRequest]) (*connect.Response[empty], error) {
	p, err := absPath(ctx, req.Msg.Path)
	if err != nil {
		return nil, err
	}
	f, done, _, err := h.files(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := f.Remove(ctx, p); err != nil {
		return nil, h.rpcError(err)
	}
	return connect.NewResponse(&empty{}), nil
}
