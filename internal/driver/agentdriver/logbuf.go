package agentdriver

import (
	"io"
	"os"
	"sync"
)

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

// Tail returns at most the last n bytes of the file at path: the end of a
// log that a sandbox's holder writes (the agent's, runsc's), for an error
// message.
func Tail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return b
}
