//go:build !linux

package fsroot

import (
	"fmt"
	"io"
	"io/fs"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// errUnsupported is what every operation returns off Linux.
var errUnsupported = fmt.Errorf("the sandbox file API needs Linux (openat2): %w", sandbox.ErrUnsupported)

// Root is a directory whose paths are resolved only inside it. It exists
// only on Linux.
type Root struct{}

// Open fails off Linux with an error wrapping sandbox.ErrUnsupported.
func Open(dir string, uid, gid int, workdir string) (*Root, error) { return nil, errUnsupported }

// Close does nothing.
func (r *Root) Close() error { return nil }

// ReadFile is not supported off Linux.
func (r *Root) ReadFile(name string, offset, limit int64, w io.Writer) (int64, error) {
	return 0, errUnsupported
}

// WriteFile is not supported off Linux.
func (r *Root) WriteFile(name string, src io.Reader, mode fs.FileMode, maxBytes int64) (int64, error) {
	return 0, errUnsupported
}

// ReadDir is not supported off Linux.
func (r *Root) ReadDir(name string) ([]sandbox.FileInfo, error) { return nil, errUnsupported }

// Stat is not supported off Linux.
func (r *Root) Stat(name string) (sandbox.FileInfo, error) { return sandbox.FileInfo{}, errUnsupported }

// Mkdir is not supported off Linux.
func (r *Root) Mkdir(name string, mode fs.FileMode) error { return errUnsupported }

// Remove is not supported off Linux.
func (r *Root) Remove(name string) error { return errUnsupported }

// Rename is not supported off Linux.
func (r *Root) Rename(oldname, newname string) error { return errUnsupported }

// Symlink is not supported off Linux.
func (r *Root) Symlink(target, name string) error { return errUnsupported }

// Resolve is not supported off Linux.
func (r *Root) Resolve(name string) (string, error) { return "", errUnsupported }

// NoFollow returns r off Linux.
func (r *Root) NoFollow() *Root { return r }
