//go:build linux

package fsroot

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// errnoError is a system call's failure in words a caller can act on. It
// wraps both its class (sandbox.ErrNotFound, ...) and the errno, so that
// errors.Is(err, fs.ErrPermission) works too.
type errnoError struct {
	msg   string
	class error // nil when no class fits
	errno unix.Errno
}

func (e *errnoError) Error() string { return e.msg }

func (e *errnoError) Unwrap() []error {
	if e.class == nil {
		return []error{e.errno}
	}
	return []error{e.class, e.errno}
}

// errKernelFS refuses paths on /proc, /sys and their kin.
var errKernelFS = fmt.Errorf("the file API does not reach /proc, /sys or other kernel file systems; run a command instead: %w", sandbox.ErrInvalid)

// fail wraps err, the failure of op on the in-root path p, naming p (never a
// host path) and mapping an errno to its error class.
func fail(op, p string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s %s: %w", op, p, err)
	}
	return fmt.Errorf("%s %s: %w", op, p, classify(errno))
}

// classify maps errno to an error of the right class.
func classify(errno unix.Errno) *errnoError {
	e := &errnoError{msg: errno.Error(), errno: errno}
	switch errno {
	case unix.ENOENT:
		e.msg, e.class = "no such file or directory", sandbox.ErrNotFound
	case unix.EEXIST:
		e.msg, e.class = "already exists", sandbox.ErrExists
	case unix.ENOTEMPTY:
		e.msg, e.class = "directory not empty", sandbox.ErrExists
	case unix.EACCES, unix.EPERM:
		e.msg = "permission denied"
	case unix.ENOSPC, unix.EDQUOT:
		e.msg, e.class = "disk full", sandbox.ErrLimit
	case unix.EFBIG:
		// The agent writes under RLIMIT_FSIZE, the sandbox's disk size.
		e.msg, e.class = "file too large: it would be larger than the sandbox's disk", sandbox.ErrLimit
	case unix.ELOOP:
		e.msg, e.class = "a symlink on the way (the file API writes only through real directories: write to the path it leads to), a symlink loop, or a /proc magic link, which the file API never follows", sandbox.ErrInvalid
	case unix.ENOTDIR:
		e.msg, e.class = "a path component is not a directory", sandbox.ErrInvalid
	case unix.EISDIR:
		e.msg, e.class = "is a directory", sandbox.ErrInvalid
	case unix.EXDEV:
		e.msg, e.class = "cannot move across file systems (mount points)", sandbox.ErrInvalid
	case unix.EBUSY:
		e.msg, e.class = "busy (a mount point?)", sandbox.ErrInvalid
	case unix.ENAMETOOLONG:
		e.msg, e.class = "name too long", sandbox.ErrInvalid
	case unix.EINVAL:
		e.msg, e.class = "invalid argument", sandbox.ErrInvalid
	case unix.EROFS:
		e.msg, e.class = "read-only file system: write under /workspace or /tmp", fs.ErrPermission
	}
	return e
}
