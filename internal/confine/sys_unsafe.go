//go:build linux

package confine

import (
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompSetFilter loads prog on the calling thread with
// seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog).
func seccompSetFilter(prog []bpf.RawInstruction) error {
	if len(prog) == 0 || len(prog) > bpfMaxInsns {
		return unix.EINVAL
	}
	filters := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filters[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filters)
	if errno != 0 {
		return errno
	}
	return nil
}

// seccompActionAvail asks the kernel whether it knows the return action a.
func seccompActionAvail(a uint32) error {
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&a)))
	if errno != 0 {
		return errno
	}
	return nil
}

// landlockVersion returns the kernel's Landlock ABI version.
func landlockVersion() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(v), nil
}

// landlockCreateRuleset creates a ruleset from attr's handled_access_fs,
// handled_access_net and scoped fields; the size passed stops before the
// newer fields so that older kernels accept it.
func landlockCreateRuleset(attr *unix.LandlockRulesetAttr) (int, error) {
	size := unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), size, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// landlockAddPathRule adds a path-beneath rule to a ruleset.
func landlockAddPathRule(ruleset int, attr *unix.LandlockPathBeneathAttr) error {
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// landlockRestrictSelf enforces a ruleset on the calling thread only.
func landlockRestrictSelf(ruleset int) error {
	_, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
