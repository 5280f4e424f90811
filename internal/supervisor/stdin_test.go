package supervisor

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestAbandonedStdinWrites: writes to the standard input of a process that
// does not read it, given up by their callers, leave nothing behind: no
// goroutine, and no more than the process's bounded queue of data (the
// security review's F2 saw a goroutine and the payload kept per write).
func TestAbandonedStdinWrites(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's sleep never reads its standard input.
	p, err := f.sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	data := bytes.Repeat([]byte("A"), 1<<20)
	for i := 0; i < 40; i++ {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := f.sup.WriteStdin(wctx, alice, in.ID, p.ID, data, false)
		cancel()
		if i > 0 && err == nil {
			t.Fatalf("write %d to a process that reads nothing succeeded", i)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+3 {
		t.Fatalf("%d goroutines before 40 abandoned stdin writes, %d after: each write left one behind", before, after)
	}
	f.sup.mu.Lock()
	l := f.sup.live[in.ID]
	f.sup.mu.Unlock()
	l.mu.Lock()
	q := l.procs[p.ID].stdin
	l.mu.Unlock()
	q.mu.Lock()
	held := len(q.buf)
	q.mu.Unlock()
	if held > maxStdinQueue {
		t.Fatalf("%d bytes queued for a process that reads nothing; at most %d may be", held, maxStdinQueue)
	}
}

// TestStdinStall: a write that cannot go on because the process does not
// read is refused after the stall timeout with a rate-limit error, and a
// process that reads gets every byte in order.
func TestStdinStall(t *testing.T) {
	f := newFixture(t, Config{})
	f.sup.stdinStall = 50 * time.Millisecond
	ctx := context.Background()
	in, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = f.sup.WriteStdin(ctx, alice, in.ID, p.ID, bytes.Repeat([]byte("A"), 3<<20), false)
	if !errors.Is(err, ErrRateLimited) || time.Since(start) > 5*time.Second {
		t.Fatalf("a write to a process that reads nothing: %v after %v", err, time.Since(start))
	}
	// cat reads: 3 MiB in one write goes through the 1 MiB queue.
	c, err := f.sup.StartProcess(ctx, alice, in.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"cat"}, Stdin: []byte("first ")}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	if err := f.sup.WriteStdin(ctx, alice, in.ID, c.ID, big, true); err != nil {
		t.Fatal(err)
	}
	w, err := f.sup.Wait(ctx, alice, in.ID, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Wait returns the tail the process's output buffer keeps, at its
	// offset: the end of everything written, in order.
	if want := append([]byte("first "), big...); w.StdoutOffset+int64(len(w.Stdout)) != int64(len(want)) || !bytes.Equal(w.Stdout, want[w.StdoutOffset:]) || len(w.Stdout) == 0 {
		t.Fatalf("cat's output ends with %d bytes from %d that are not the end of what was written (%d bytes)", len(w.Stdout), w.StdoutOffset, len(want))
	}
	if err := f.sup.WriteStdin(ctx, alice, in.ID, c.ID, []byte("late"), false); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("a write after eof: %v", err)
	}
}
