package wasm

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/fsroot"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// files is a sandbox's file API: fsroot on the sandbox's directory, whose
// root holds /workspace and /tmp, so that every path is resolved inside
// it. Writes go only to /workspace and /tmp, and only as far as their
// sizes allow.
type files struct {
	in       *instance
	root     *fsroot.Root
	noFollow bool
}

var _ sandbox.Files = (*files)(nil)

// NoFollow returns the API whose writes follow no symlink.
func (f *files) NoFollow() sandbox.Files { return &files{in: f.in, root: f.root, noFollow: true} }

func (f *files) ReadFile(_ context.Context, p string, offset, limit int64, w io.Writer) error {
	_, err := f.root.ReadFile(p, offset, limit, w)
	return err
}

func (f *files) ReadDir(_ context.Context, p string) ([]sandbox.FileInfo, error) {
	return f.root.ReadDir(p)
}

func (f *files) Stat(_ context.Context, p string) (sandbox.FileInfo, error) { return f.root.Stat(p) }

func (f *files) Resolve(_ context.Context, p string) (string, error) { return f.root.Resolve(p) }

// writable resolves p for a write and returns the mount it lands in and
// the path to write, which the NoFollow root then writes without following
// a symlink: where the mount was checked, even if a command swaps a
// directory for a symlink meanwhile. Through a NoFollow view, p itself is
// written, and a symlink on its way fails.
func (f *files) writable(op, p string) (*mount, string, error) {
	r, err := f.root.Resolve(p)
	if err != nil {
		return nil, "", err
	}
	m, _ := f.in.mountOf(r)
	if m == nil {
		return nil, "", fmt.Errorf("%s %s: read-only file system: write under /workspace or /tmp: %w", op, r, fs.ErrPermission)
	}
	if f.noFollow {
		return m, p, nil
	}
	return m, r, nil
}

// WriteFile writes the file, as large as its mount has room for.
func (f *files) WriteFile(_ context.Context, p string, r io.Reader, mode fs.FileMode) error {
	m, resolved, err := f.writable("write", p)
	if err != nil {
		return err
	}
	if m.addEntry() != 0 {
		return fmt.Errorf("write %s: %s holds as many files as it may: %w", resolved, m.guest, sandbox.ErrLimit)
	}
	m.mu.Lock()
	m.recount()
	room := max(m.limit-m.used, 0)
	m.mu.Unlock()
	if room == 0 {
		return fmt.Errorf("write %s: disk full: %s holds %s; delete files or raise --disk: %w", resolved, m.guest, sandbox.FormatBytes(m.limit), sandbox.ErrLimit)
	}
	n, err := f.root.NoFollow().WriteFile(resolved, r, mode, room)
	if err != nil {
		if room > 0 && n == 0 && strings.Contains(err.Error(), "larger than") {
			return fmt.Errorf("write %s: disk full: the file is larger than the %s left in %s; delete files or raise --disk: %w", resolved, sandbox.FormatBytes(room), m.guest, sandbox.ErrLimit)
		}
		return err
	}
	m.mu.Lock()
	m.used += n
	m.mu.Unlock()
	return nil
}

func (f *files) Mkdir(_ context.Context, p string, mode fs.FileMode) error {
	m, w, err := f.writable("mkdir", p)
	if err != nil {
		return err
	}
	if m.addEntry() != 0 {
		return fmt.Errorf("mkdir %s: %s holds as many files as it may: %w", p, m.guest, sandbox.ErrLimit)
	}
	return f.root.NoFollow().Mkdir(w, mode)
}

func (f *files) Remove(_ context.Context, p string) error {
	_, w, err := f.writable("remove", p)
	if err != nil {
		return err
	}
	return f.root.NoFollow().Remove(w)
}

func (f *files) Rename(_ context.Context, oldpath, newpath string) error {
	m1, r1, err := f.writable("rename", oldpath)
	if err != nil {
		return err
	}
	m2, r2, err := f.writable("rename", newpath)
	if err != nil {
		return err
	}
	if m1 != m2 {
		return fmt.Errorf("rename %s to %s: cannot move across file systems (%s and %s): copy it instead: %w", r1, r2, m1.guest, m2.guest, sandbox.ErrInvalid)
	}
	return f.root.NoFollow().Rename(r1, r2)
}

func (f *files) Symlink(_ context.Context, target, p string) error {
	m, w, err := f.writable("symlink", p)
	if err != nil {
		return err
	}
	if m.addEntry() != 0 {
		return fmt.Errorf("symlink %s: %s holds as many files as it may: %w", p, m.guest, sandbox.ErrLimit)
	}
	return f.root.NoFollow().Symlink(target, w)
}
