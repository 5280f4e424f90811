package sandboxtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostInotify makes an inotify instance on the host and closes it again.
func hostInotify() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify_init1: %w", err)
	}
	return unix.Close(fd)
}

// hostAIO sets up a Linux AIO context of one event on the host and
// destroys it again.
func hostAIO() error {
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return fmt.Errorf("io_setup: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IO_DESTROY, ctx, 0, 0); e != 0 {
		return fmt.Errorf("io_destroy: %w", e)
	}
	return nil
}

// hostPTYs is how many terminals the host kernel has open, in every
// devpts instance.
func hostPTYs() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/pty/nr")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
