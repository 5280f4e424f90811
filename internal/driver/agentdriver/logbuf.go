package agentdriver

import "sync"

// LogBuffer keeps the first 8 KiB written to it: what an agent (or the
// runtime that starts it) writes to standard error, for error messages.
// The agent is untrusted, so the host keeps no more than that.
type LogBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 8<<10 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept.
func (b *LogBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}
