package agentd

import (
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper is the agent's PID 1 duty: it waits for every child, its own and
// the orphans the kernel hands it, so no zombie holds a pid of the limit.
// Each exit status goes to whoever registered the pid.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

func startReaper() *reaper {
	r := &reaper{waiting: map[int]chan unix.WaitStatus{}}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, unix.SIGCHLD)
	go func() {
		for range ch {
			r.reapAll()
		}
	}()
	return r
}

func (r *reaper) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
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
	return pid, ch, nil
}
