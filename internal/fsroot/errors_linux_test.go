//go:build linux

package fsroot

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestClassify checks the errno to class mapping, in particular the two a
// caller causes on purpose: a file larger than the sandbox's disk (the
// agent writes under RLIMIT_FSIZE, so EFBIG) and a write outside the
// writable directories (EROFS). Both were once unclassified and reached
// API callers as "internal error".
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		errno unix.Errno
		class error
		msg   string
	}{
		{errno: unix.ENOENT, class: sandbox.ErrNotFound, msg: "no such file"},
		{errno: unix.ENOSPC, class: sandbox.ErrLimit, msg: "disk full"},
		{errno: unix.EFBIG, class: sandbox.ErrLimit, msg: "larger than the sandbox's disk"},
		{errno: unix.EROFS, class: fs.ErrPermission, msg: "write under /workspace or /tmp"},
		{errno: unix.EACCES, class: fs.ErrPermission, msg: "permission denied"},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			err := fail("write", "/x", tc.errno)
			if !errors.Is(err, tc.class) || !errors.Is(err, tc.errno) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("fail(%v) = %v; want class %v and %q", tc.errno, err, tc.class, tc.msg)
			}
		})
	}
}
