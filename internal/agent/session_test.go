package agent

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestSessionEndLeavesNextSession: once a session has ended and the next
// session reads the connection, a later Close of the ended one (as its
// HTTP/2 connection's read loop closes it when its read returns end of
// file, at whatever time the scheduler runs it) must not touch the
// connection: it used to set the connection's read deadline to now,
// which broke the next session's read under way, and the next call on it
// failed ("write envelope: EOF", TestLiveFork's one failure).
func TestSessionEndLeavesNextSession(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	defer guest.Close()
	var wmu sync.Mutex
	old := NewSession(host, &wmu)
	oldRead := make(chan error, 1)
	go func() {
		_, err := old.Read(make([]byte, 1))
		oldRead <- err
	}()
	time.Sleep(10 * time.Millisecond) // the old session's read is under way
	old.End()
	if err := <-oldRead; !errors.Is(err, io.EOF) {
		t.Fatalf("the ended session's read: %v, want EOF", err)
	}
	next := NewSession(host, &wmu)
	type result struct {
		b   []byte
		err error
	}
	nextRead := make(chan result, 1)
	go func() {
		b := make([]byte, 5)
		n, err := io.ReadFull(next, b)
		nextRead <- result{b[:n], err}
	}()
	time.Sleep(10 * time.Millisecond) // the next session's read is under way
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	_ = guest.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := guest.Write([]byte("hello")); err != nil {
		t.Fatalf("write to the next session: %v (its read ended early)", err)
	}
	select {
	case r := <-nextRead:
		if r.err != nil || string(r.b) != "hello" {
			t.Fatalf("the next session read %q, %v; want hello", r.b, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the next session's read did not return")
	}
}
