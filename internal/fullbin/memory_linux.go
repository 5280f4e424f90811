package fullbin

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// inMemory unpacks the complete airlock into a memory file and returns a
// path that executes it. The memory stays taken while the program runs.
func inMemory(fsys fs.FS) (string, error) {
	fd, err := unix.MemfdCreate("airlock", unix.MFD_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("unpack the complete airlock in memory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock")
	if err := unpack(fsys, f); err != nil {
		f.Close()
		return "", fmt.Errorf("unpack the complete airlock in memory: %w", err)
	}
	// Left open: the path names this descriptor, which exec closes.
	return fmt.Sprintf("/proc/self/fd/%d", fd), nil
}
