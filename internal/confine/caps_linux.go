package confine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SetNoNewPrivs sets no_new_privs on the calling thread only: execve can no
// longer grant privileges (setuid bits, file capabilities), and seccomp and
// Landlock may then be applied without CAP_SYS_ADMIN. Children forked from
// the thread inherit it. Lock the goroutine to its thread first.
func SetNoNewPrivs() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// DropBoundingSet empties the calling thread's capability bounding set
// (PR_CAPBSET_DROP for every capability up to the kernel's last, read from
// /proc/sys/kernel/cap_last_cap), so that nothing executed from it can gain
// a capability. Other threads keep theirs. It needs CAP_SETPCAP. Lock the
// goroutine to its thread first.
func DropBoundingSet() error {
	last, err := lastCap()
	if err != nil {
		return fmt.Errorf("drop capability bounding set: %w", err)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// lastCap returns the highest capability number the kernel knows. Without
// /proc it asks the kernel for each number until it says there is none.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("parse /proc/sys/kernel/cap_last_cap %q", b)
		}
		return n, nil
	}
	for c := 0; c < 1024; c++ {
		_, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			if c == 0 {
				break
			}
			return c - 1, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read capability %d of the bounding set: %w", c, err)
		}
	}
	return 0, errors.New("find the last capability: the kernel reports none")
}
