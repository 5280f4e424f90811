package wasm

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// WarmState reports whether sb has a warm python3 ready and how many execs
// warm python3s have run in it.
func WarmState(sb sandbox.Instance) (ready bool, runs int) {
	in := sb.(*instance)
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.warm != nil, in.warmRuns
}

// WarmWaiting reports whether sb's warm python3 has finished starting and
// waits for its exec.
func WarmWaiting(sb sandbox.Instance) bool {
	in := sb.(*instance)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.warm == nil {
		return false
	}
	select {
	case <-in.warm.waiting:
		return true
	default:
		return false
	}
}
