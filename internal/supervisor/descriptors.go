package supervisor

import (
	"fmt"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// descriptorReserve is how many of the daemon's open files admission
// keeps for what is not a sandbox's: API connections, the registry, the
// audit log, egress connections.
const descriptorReserve = 1024

// fileLimit is the daemon's RLIMIT_NOFILE (Go raises the soft limit to the
// hard one at start); 0 when it cannot be read. A variable for tests.
var fileLimit = func() int64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<40 {
		return 0
	}
	return int64(l.Cur)
}

// descriptorsOf is what a sandbox of rec holds open in the daemon, as its
// driver declares it (sandbox.Overhead.Descriptors).
func (s *Supervisor) descriptorsOf(rec store.Sandbox) int64 {
	if d, ok := s.opts.Drivers[rec.Driver]; ok {
		return sandbox.HostDescriptors(d, rec.Spec)
	}
	return 0
}

// checkDescriptors refuses a sandbox whose open files (need) the daemon
// has no room for beside those of the live ones and descriptorReserve.
// s.mu is held.
func (s *Supervisor) checkDescriptors(need int64) error {
	limit := fileLimit()
	if need == 0 || limit == 0 {
		return nil
	}
	var held int64
	for _, l := range s.live {
		held += l.fds
	}
	if held+need > limit-descriptorReserve {
		return fmt.Errorf("%w: the daemon's open-file limit (RLIMIT_NOFILE %d, %d kept for connections) has no room for the %d files this sandbox holds open in it beside the %d its %d live sandboxes hold; raise LimitNOFILE of the daemon, or delete sandboxes",
			ErrCapacity, limit, descriptorReserve, need, held, len(s.live))
	}
	return nil
}
