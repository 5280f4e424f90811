package agentdriver

import (
	"context"
	"io"
	"io/fs"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// files is the sandbox's file API, served by its agent. On a sandbox that
// has ended, every call says why it ended, the same on every driver.
type files struct {
	in  *Instance
	api sandbox.Files
}

var _ sandbox.Files = files{}

// call runs a file call, and turns the error of a dead sandbox into why it
// ended.
func (f files) call(fn func() error) error {
	if f.in.isDone() {
		return f.in.endedError()
	}
	err := fn()
	if err != nil && f.in.isDone() {
		return f.in.endedError()
	}
	return err
}

func (f files) ReadFile(ctx context.Context, path string, offset, limit int64, w io.Writer) error {
	return f.call(func() error { return f.api.ReadFile(ctx, path, offset, limit, w) })
}

func (f files) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	return f.call(func() error { return f.api.WriteFile(ctx, path, r, mode) })
}

func (f files) ReadDir(ctx context.Context, path string) (fi []sandbox.FileInfo, err error) {
	err = f.call(func() error { fi, err = f.api.ReadDir(ctx, path); return err })
	return fi, err
}

func (f files) Stat(ctx context.Context, path string) (fi sandbox.FileInfo, err error) {
	err = f.call(func() error { fi, err = f.api.Stat(ctx, path); return err })
	return fi, err
}

func (f files) Mkdir(ctx context.Context, path string, mode fs.FileMode) error {
	return f.call(func() error { return f.api.Mkdir(ctx, path, mode) })
}

func (f files) Remove(ctx context.Context, path string) error {
	return f.call(func() error { return f.api.Remove(ctx, path) })
}

func (f files) Rename(ctx context.Context, oldpath, newpath string) error {
	return f.call(func() error { return f.api.Rename(ctx, oldpath, newpath) })
}

func (f files) Symlink(ctx context.Context, target, path string) error {
	return f.call(func() error { return f.api.Symlink(ctx, target, path) })
}

func (f files) Resolve(ctx context.Context, path string) (p string, err error) {
	err = f.call(func() error { p, err = f.api.Resolve(ctx, path); return err })
	return p, err
}

func (f files) NoFollow() sandbox.Files { return files{in: f.in, api: f.api.NoFollow()} }
