package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// subreaper makes the test process the subreaper of what its daemons
// leave behind (agents whose daemon was killed come to it instead of the
// host's init, whose reaping this host does not promise) until t ends. It
// is counted: tests that run side by side each hold it, and the last to
// end turns it off.
func subreaper(t *testing.T) {
	t.Helper()
	subreapers.Lock()
	defer subreapers.Unlock()
	if subreapers.n == 0 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	subreapers.n++
	t.Cleanup(func() {
		subreapers.Lock()
		defer subreapers.Unlock()
		if subreapers.n--; subreapers.n == 0 {
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		}
	})
}

var subreapers struct {
	sync.Mutex
	n int
}

// reapOrphans reaps the adopted orphans that have exited: the test
// process's children in the zombie state that startChild did not start.
func reapOrphans() {
	children.Lock()
	defer children.Unlock()
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || children.pids[pid] {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold anything but ends at
		// the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] != "Z" || f[1] != strconv.Itoa(self) {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}
