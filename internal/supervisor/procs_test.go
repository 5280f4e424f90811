package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestFollowAndOutput follows a process from now and from the start, and
// reads its output from offsets.
func TestFollowAndOutput(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sup.StartProcess(ctx, alice, sb.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"cat"}, Stdin: []byte("early ")}, KeepStdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until cat has copied the first input.
	for deadline := time.Now().Add(5 * time.Second); ; {
		o, err := f.sup.Output(ctx, alice, sb.ID, p.ID, Offsets{})
		if err != nil {
			t.Fatal(err)
		}
		if string(o.Stdout) == "early " {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("output: %q", o.Stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}

	var mu sync.Mutex
	var late []OutputEvent
	var started ProcessInfo
	followed := make(chan ProcessInfo, 1)
	go func() {
		info, err := f.sup.Follow(ctx, alice, sb.ID, p.ID, Offsets{Now: true}, func(p ProcessInfo) error {
			started = p
			return nil
		}, func(ev OutputEvent) error {
			mu.Lock()
			late = append(late, ev)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		followed <- info
	}()
	time.Sleep(100 * time.Millisecond)
	if err := f.sup.WriteStdin(ctx, alice, sb.ID, p.ID, []byte("late"), true); err != nil {
		t.Fatal(err)
	}
	info := <-followed
	if info.Running || info.Result == nil || info.Result.ExitCode != 0 || started.ID != p.ID {
		t.Fatalf("follow ended with %+v (start %+v)", info, started)
	}
	var got strings.Builder
	for _, ev := range late {
		if ev.Stream != StreamStdout || ev.Offset != int64(6+got.Len()) || ev.Missed != 0 {
			t.Errorf("event %+v", ev)
		}
		got.Write(ev.Data)
	}
	if got.String() != "late" {
		t.Errorf("a follower from now got %q", got.String())
	}

	// After the end: everything from the start, then the result.
	var all strings.Builder
	info, err = f.sup.Follow(ctx, alice, sb.ID, p.ID, Offsets{}, nil, func(ev OutputEvent) error {
		all.Write(ev.Data)
		return nil
	})
	if err != nil || all.String() != "early late" || info.Result == nil {
		t.Fatalf("follow after the end: %q %+v %v", all.String(), info, err)
	}
	o, err := f.sup.Output(ctx, alice, sb.ID, p.ID, Offsets{Stdout: 3})
	if err != nil || string(o.Stdout) != "ly late" || o.StdoutOffset != 3 || o.Running {
		t.Errorf("output from 3: %q at %d, %+v, %v", o.Stdout, o.StdoutOffset, o, err)
	}
	o, err = f.sup.Output(ctx, alice, sb.ID, p.ID, Offsets{Stdout: 99})
	if err != nil || len(o.Stdout) != 0 {
		t.Errorf("output past the end: %q, %v", o.Stdout, err)
	}
	if _, err := f.sup.Output(ctx, alice, sb.ID, p.ID, Offsets{Stdout: -1}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a negative offset: %v", err)
	}
	if _, err := f.sup.Follow(ctx, bob, sb.ID, p.ID, Offsets{}, nil, func(OutputEvent) error { return nil }); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob follows alice's process: %v", err)
	}
	if _, err := f.sup.Follow(ctx, alice, sb.ID, "e999", Offsets{}, nil, func(OutputEvent) error { return nil }); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("following a process that is not there: %v", err)
	}
}

// TestFinishedOutputBounded: ended processes keep at most
// maxFinishedOutput bytes of output in all; the oldest go first.
func TestFinishedOutputBounded(t *testing.T) {
	f := newFixture(t, Config{Templates: []Template{{Name: DefaultTemplate, OutputBuffer: 1 << 20}}})
	ctx := context.Background()
	sb, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 1<<20)) // through cat: 1 MiB each
	var ids []string
	for range 20 {
		var out strings.Builder
		if _, err := f.sup.Exec(ctx, alice, sb.ID, ExecRequest{Argv: []string{"cat"}, Stdin: big, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		ps, _ := f.sup.Processes(ctx, alice, sb.ID)
		ids = append(ids, ps[len(ps)-1].ID)
	}
	ps, _ := f.sup.Processes(ctx, alice, sb.ID)
	if len(ps) != 16 || ps[0].ID != ids[4] || ps[15].ID != ids[19] {
		t.Errorf("kept %d processes, from %s; want the last 16 (%s…)", len(ps), ps[0].ID, ids[4])
	}
	if _, err := f.sup.Wait(ctx, alice, sb.ID, ids[0]); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the oldest process is still there: %v", err)
	}
	w, err := f.sup.Wait(ctx, alice, sb.ID, ids[19])
	if err != nil || len(w.Stdout) != 1<<20 {
		t.Errorf("the last process: %d bytes, %v", len(w.Stdout), err)
	}
}

func TestResize(t *testing.T) {
	f := newFixture(t, Config{})
	ctx := context.Background()
	sb, err := f.sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sup.StartProcess(ctx, alice, sb.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}, PTY: &sandbox.TermSize{Rows: 24, Cols: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.PTY == nil || *p.PTY != (sandbox.TermSize{Rows: 24, Cols: 80}) {
		t.Fatalf("started: %+v", p)
	}
	if err := f.sup.Resize(ctx, alice, sb.ID, p.ID, sandbox.TermSize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	if ps, _ := f.sup.Processes(ctx, alice, sb.ID); *ps[0].PTY != (sandbox.TermSize{Rows: 50, Cols: 132}) {
		t.Errorf("after resize: %+v", ps[0].PTY)
	}
	if err := f.sup.Resize(ctx, alice, sb.ID, p.ID, sandbox.TermSize{Rows: 0, Cols: 132}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("resize to 0 rows: %v", err)
	}
	if err := f.sup.Resize(ctx, bob, sb.ID, p.ID, sandbox.TermSize{Rows: 5, Cols: 5}); !errors.Is(err, ErrForbidden) {
		t.Errorf("bob resizes alice's terminal: %v", err)
	}
	pipes, _ := f.sup.StartProcess(ctx, alice, sb.ID, StartRequest{ExecRequest: ExecRequest{Argv: []string{"sleep"}}})
	if err := f.sup.Resize(ctx, alice, sb.ID, pipes.ID, sandbox.TermSize{Rows: 5, Cols: 5}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "no terminal") {
		t.Errorf("resize of a process on pipes: %v", err)
	}
	_ = f.sup.Signal(ctx, alice, sb.ID, p.ID, 9)
	if _, err := f.sup.Wait(ctx, alice, sb.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sup.Resize(ctx, alice, sb.ID, p.ID, sandbox.TermSize{Rows: 5, Cols: 5}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("resize of an ended process: %v", err)
	}
}

// noPTY is a driver without terminals.
type noPTY struct{ *fake.Driver }

func (d noPTY) Capabilities() sandbox.Capabilities {
	c := d.Driver.Capabilities()
	c.PTY = false
	return c
}

func TestPTYUnsupported(t *testing.T) {
	st := newFixture(t, Config{}).st
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": noPTY{&fake.Driver{}}}, MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	sb, err := sup.Create(ctx, alice, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.Exec(ctx, alice, sb.ID, ExecRequest{Argv: []string{"true"}, PTY: &sandbox.TermSize{Rows: 24, Cols: 80}})
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a terminal from a driver without them: %v", err)
	}
}
