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
