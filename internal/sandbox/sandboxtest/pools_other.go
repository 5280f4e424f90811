//go:build !linux

package sandboxtest

import "errors"

// hostInotify: only Linux has inotify.
func hostInotify() error { return errors.ErrUnsupported }

// hostAIO: only Linux has Linux AIO.
func hostAIO() error { return errors.ErrUnsupported }

// hostPTYs: only Linux counts its terminals there.
func hostPTYs() (int, error) { return 0, errors.ErrUnsupported }
