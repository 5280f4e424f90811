//go:build !linux

package testrig

import "errors"

// errLinux says the rigs run on Linux only.
var errLinux = errors.New("the test rigs run on Linux only")

// MountsUnder lists the mount points at or below dir; Linux only.
func MountsUnder(string) ([]string, error) { return nil, errLinux }

// UnmountUnder detaches every mount at or below dir; Linux only.
func UnmountUnder(string) error { return errLinux }
