//go:build linux

package hostcap

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompActionAvail asks the kernel whether a seccomp filter may return
// action (seccomp(SECCOMP_GET_ACTION_AVAIL)).
func seccompActionAvail(action uint32) error {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	if errno != 0 {
		return errno
	}
	return nil
}
