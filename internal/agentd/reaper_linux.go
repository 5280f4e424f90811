package agentd

import (
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper is the agent's PID 1 duty: it waits for every child, its own and
// the orphans the kernel hands it, so no zombie holds a pid of the limit.
// Each exit status goes to whoever registered the pid.
//
// It waits in a blocking wait4 on the main thread, which the main
// goroutine holds for the agent's life anyway (see cmd/airlock-agent):
// being told of SIGCHLD through os/signal instead keeps a thread of its own
// blocked for good, one more kernel task per sandbox (docs/decisions.md).
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	// kick wakes run when it found no child to wait for and one was
	// started since.
	kick chan struct{}
}

func newReaper() *reaper {
	return &reaper{waiting: map[int]chan unix.WaitStatus{}, kick: make(chan struct{}, 1)}
}

// run reaps children until the process exits. It never returns: call it
// on the main goroutine once nothing else needs it.
func (r *reaper) run() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			// ECHILD: no child at all, so no orphan can come either
			// until a command starts.
			<-r.kick
			continue
		}
		r.mu.Lock()
		if ch, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			ch <- ws
		}
		r.mu.Unlock()
	}
}

// spawn runs start, which starts one process and returns its pid, and
// returns a channel that receives the process's exit status. The lock held
// around start makes sure no status is reaped before it is registered.
func (r *reaper) spawn(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[pid] = ch
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return pid, ch, nil
}
