package gvisor

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// A checkpoint that runs out of disk does not fail cleanly: runsc's
// kernel panics writing the image (urpc.go), and the sandbox is lost
// (TestPauseDiskFull found it). So the pause checks first that the image's
// disk has room for what the sandbox holds: its host cgroup's memory (the
// application's memory file and gVisor's kernel, and page cache: more
// than the image), an eighth more and 16 MiB. A disk that fills up during
// the checkpoint anyway still loses the sandbox.

// imageMargin is the room asked beyond the sandbox's memory.
const imageMargin = 16 << 20

// checkRoom refuses the pause of h into dir when dir's disk lacks room for
// its image (unix.ENOSPC).
func (h *host) checkRoom(dir string) error {
	if h.group == nil {
		return nil
	}
	mem, err := h.group.MemoryCurrent()
	if err != nil || mem <= 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("pause %s: read the free space of %s: %w", h.spec.ID, dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if need := mem + mem/8 + imageMargin; free < need {
		return fmt.Errorf("pause %s: %w: %s has %d MiB free, and the image of the sandbox's %d MiB of memory needs up to %d MiB", h.spec.ID, unix.ENOSPC, dir, free>>20, mem>>20, need>>20)
	}
	return nil
}
