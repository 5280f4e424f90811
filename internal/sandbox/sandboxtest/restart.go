package sandboxtest

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Surviving a restart of the process that made the sandbox. A driver that
// declares Capabilities.SurvivesRestart makes a sandbox with one driver
// value, lets go of it without closing it (Detacher: what a daemon that
// stops, or dies, does), and reattaches with a fresh driver value from the
// state its instance gave (Recoverer): files, background processes, a
// command that ran on meanwhile and new commands are all there. A driver
// that does not declare it must refuse to reattach. The cases run alone:
// reattaching has 5 s, and a trickle's lines 1.5 s apart are checked.
func restartCases() []testCase {
	return []testCase{
		{name: "reattach", alone: true, closes: true, needs: []need{needRestart, needFiles, needBackground}, run: reattach},
		{name: "gone", alone: true, closes: true, needs: []need{needRestart}, run: reattachGone},
		{name: "refused", alone: true, needs: []need{needNoRestart}, run: reattachRefused},
		{name: "restore_across_detach", alone: true, closes: true, needs: []need{needRestart, needShell, needSnapshots}, run: restoreAcrossDetach},
	}
}

// survives returns what a case needs of a driver whose sandboxes survive a
// restart (needRestart).
func survives(t *testing.T, e *env) (sandbox.Recoverer, sandbox.StateHolder, sandbox.Detacher) {
	t.Helper()
	rc, ok := e.driver.(sandbox.Recoverer)
	if !ok {
		t.Fatalf("the %s driver declares SurvivesRestart but is no sandbox.Recoverer", e.driver.Name())
	}
	sh, ok1 := e.sb.(sandbox.StateHolder)
	dt, ok2 := e.sb.(sandbox.Detacher)
	if !ok1 || !ok2 {
		t.Fatalf("the %s driver declares SurvivesRestart, but its instance is not a sandbox.StateHolder (%v) and a sandbox.Detacher (%v)", e.driver.Name(), ok1, ok2)
	}
	return rc, sh, dt
}

// recoverWith reattaches to id with a fresh driver value of the case's kind.
func (e *env) recoverWith(t *testing.T, id string, state []byte) (sandbox.Instance, error) {
	t.Helper()
	rc, ok := e.newDriver(t).(sandbox.Recoverer)
	if !ok {
		t.Fatalf("a fresh %s driver is no sandbox.Recoverer", e.driver.Name())
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	return rc.Recover(ctx, id, state)
}

func reattach(t *testing.T, e *env) {
	_, sh, dt := survives(t, e)
	id := e.sb.ID()
	e.writeFile(t, "/workspace/kept.txt", "kept across the restart", 0o644)
	// A background process, a command that runs on across the restart,
	// and one whose standard input stays open.
	bg := e.w.Heartbeat("/workspace/beat")
	bg.Background = true
	if _, err := e.sb.Start(e.ctx, bg); err != nil {
		t.Fatalf("start a background process: %v", err)
	}
	e.waitBeating(t, "/workspace/beat")
	var before syncBuffer
	fg := e.w.Trickle(false, "first\n", "second\n", 1500*time.Millisecond)
	fg.Stdout = &before
	fgp, err := e.sb.Start(e.ctx, fg)
	if err != nil {
		t.Fatalf("start a command: %v", err)
	}
	pr, pw := io.Pipe()
	var catBefore syncBuffer
	cat := e.w.Cat()
	cat.Stdin, cat.Stdout, cat.Background = pr, &catBefore, true
	catp, err := e.sb.Start(e.ctx, cat)
	if err != nil {
		t.Fatalf("start cat: %v", err)
	}
	_, _ = pw.Write([]byte("before\n"))
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(before.String(), "first") || catBefore.String() != "before\n"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("before the restart the command printed %q and cat %q", before.String(), catBefore.String())
		}
	}
	state, err := sh.DriverState()
	if err != nil || len(state) == 0 {
		t.Fatalf("DriverState: %q, %v", state, err)
	}

	// The restart: this process lets go of the sandbox.
	if err := dt.Detach(e.ctx); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	t.Cleanup(func() {
		// A case that stopped before it closed the reattached sandbox
		// must not leave it running.
		e.mu.Lock()
		closed := e.closed[id]
		e.mu.Unlock()
		if !closed {
			if sb, err := e.recoverWith(t, id, state); err == nil {
				e.close(t, sb)
			}
		}
	})
	pw.Close()
	// Nothing is reported as finished that did not run to its end.
	wctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	res, err := fgp.Wait(wctx)
	cancel()
	if !errors.Is(err, sandbox.ErrDetached) {
		t.Errorf("Wait of a command running when its sandbox was let go of: %s, %v; want sandbox.ErrDetached", describe(res), err)
	}
	if _, err := e.sb.Start(e.ctx, e.w.Print("x", "", 0)); err == nil {
		t.Errorf("the instance that let go of its sandbox still starts commands")
	}

	sb, err := e.recoverWith(t, id, state)
	if err != nil {
		t.Fatalf("Recover %s: %v", id, err)
	}
	t.Cleanup(func() { e.close(t, sb) })
	if sb.ID() != id {
		t.Errorf("the reattached sandbox is %q, want %q", sb.ID(), id)
	}
	prev := e.sb
	e.sb = sb
	defer func() { e.sb = prev }()
	if got, err := e.readFile("/workspace/kept.txt"); err != nil || got != "kept across the restart" {
		t.Errorf("a file written before the restart reads %q, %v", got, err)
	}
	if !e.beating(t, "/workspace/beat") {
		t.Errorf("the background process stopped across the restart")
	}
	pa, ok := sb.(sandbox.ProcessAttacher)
	if !ok {
		t.Fatalf("the reattached instance is no sandbox.ProcessAttacher")
	}
	ps, err := pa.Processes(e.ctx)
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	ids := map[string]sandbox.ProcessState{}
	for _, p := range ps {
		ids[p.ID] = p
	}
	for _, want := range []sandbox.Process{fgp, catp} {
		if _, ok := ids[want.ID()]; !ok {
			t.Fatalf("Processes after the restart lists %v, not %s", ps, want.ID())
		}
	}
	if cs := ids[catp.ID()]; !cs.Stdin || cs.Result != nil || !slices.Equal(cs.Argv, cat.Argv) {
		t.Errorf("cat after the restart: %+v; want it running with its input open", cs)
	}

	// The command that ran on: its end and what it printed.
	var after syncBuffer
	var outFrom int64 = -1
	fgp2, err := pa.Attach(e.ctx, fgp.ID(), sandbox.AttachRequest{Stdout: &after, Offsets: func(o, _ int64) { outFrom = o }})
	if err != nil {
		t.Fatalf("Attach %s: %v", fgp.ID(), err)
	}
	if res, err := fgp2.Wait(e.ctx); err != nil || res.Reason != sandbox.ReasonExit || res.ExitCode != 0 {
		t.Errorf("the command that ran on across the restart: %s, %v; want exit 0", describe(res), err)
	}
	if outFrom != 0 || after.String() != "first\nsecond\n" {
		t.Errorf("its output after the restart, from offset %d: %q; want all of it from 0", outFrom, after.String())
	}
	// Its input is still open: what the new process sends reaches it.
	var catOut syncBuffer
	catp2, err := pa.Attach(e.ctx, catp.ID(), sandbox.AttachRequest{Stdin: strings.NewReader("after\n"), Stdout: &catOut})
	if err != nil {
		t.Fatalf("Attach %s: %v", catp.ID(), err)
	}
	if res, err := catp2.Wait(e.ctx); err != nil || res.ExitCode != 0 || catOut.String() != "before\nafter\n" {
		t.Errorf("cat fed before and after the restart: %s, %v, printed %q; want exit 0 and both lines", describe(res), err, catOut.String())
	}
	// New commands work, with ids of their own.
	var out syncBuffer
	req := e.w.Print("new\n", "", 0)
	req.Stdout = &out
	p, err := sb.Start(e.ctx, req)
	if err != nil {
		t.Fatalf("a new command after the restart: %v", err)
	}
	if _, dup := ids[p.ID()]; dup || p.ID() == fgp.ID() {
		t.Errorf("a new command got id %s, which a command before the restart had", p.ID())
	}
	if res, err := p.Wait(e.ctx); err != nil || res.ExitCode != 0 || out.String() != "new\n" {
		t.Errorf("a new command after the restart: %s, %v, %q", describe(res), err, out.String())
	}
	e.close(t, sb)
}

func reattachGone(t *testing.T, e *env) {
	_, sh, _ := survives(t, e)
	id := e.sb.ID()
	state, err := sh.DriverState()
	if err != nil {
		t.Fatal(err)
	}
	e.close(t, e.sb)
	sb, err := e.recoverWith(t, id, state)
	if err == nil {
		sb.Close(context.Background())
		t.Fatalf("Recover of a closed sandbox succeeded")
	}
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover of a closed sandbox: %v; want an error wrapping sandbox.ErrNotFound", err)
	}
	if e.opts.Leaks != nil {
		e.opts.Leaks(t, id)
	}
}

func reattachRefused(t *testing.T, e *env) {
	rc, ok := e.driver.(sandbox.Recoverer)
	if !ok {
		return // it cannot even try: the declaration holds
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if sb, err := rc.Recover(ctx, e.sb.ID(), nil); !errors.Is(err, sandbox.ErrUnsupported) {
		if sb != nil {
			sb.Close(context.Background())
		}
		t.Errorf("a driver that declares its sandboxes do not survive a restart reattached, or failed otherwise: %v; want an error wrapping sandbox.ErrUnsupported", err)
	}
	// Its sandbox is untouched (the suite checks it still works).
}

// restoreAcrossDetach lets go of the sandbox while a restore runs (what a
// daemon killed during a restore does): reattached, the workspace is
// either as before the restore or the snapshot, never half; then the
// reattached instance restores as any.
func restoreAcrossDetach(t *testing.T, e *env) {
	id := e.sb.ID()
	var state []byte
	t.Cleanup(func() {
		e.mu.Lock()
		closed := e.closed[id]
		e.mu.Unlock()
		if !closed && state != nil {
			if sb, err := e.recoverWith(t, id, state); err == nil {
				e.close(t, sb)
			}
		}
	})
	prev := e.sb
	defer func() { e.sb = prev }()
	const files = `python3 -c "import os; [open('/workspace/f%d' % i, 'wb').write(os.urandom(20000)) for i in range(400)]"`
	e.shOK(t, files+` && mkdir -p /workspace/d && echo one > /workspace/d/one`)
	st := newBlobs()
	snap := e.capture(t, st)
	for round, delay := range []time.Duration{5 * time.Millisecond, 40 * time.Millisecond, 120 * time.Millisecond} {
		_, sh, dt := survives(t, e)
		e.shOK(t, files+` && rm -rf /workspace/d && mkdir -p /workspace/more && touch /workspace/more/x`)
		changed := e.capture(t, st)
		sn := e.snapshotter(t)
		errc := make(chan error, 1)
		go func() {
			_, err := sn.Apply(e.ctx, sandbox.ApplyRequest{Roots: []string{sandbox.Workspace}, Entries: snap.Entries}, st.get)
			errc <- err
		}()
		time.Sleep(delay)
		var err error
		if state, err = sh.DriverState(); err != nil {
			t.Fatalf("DriverState: %v", err)
		}
		if err := dt.Detach(e.ctx); err != nil {
			t.Fatalf("Detach: %v", err)
		}
		select {
		case err = <-errc:
		case <-time.After(30 * time.Second):
			t.Fatal("a restore went on after its sandbox was let go of")
		}
		sb, rerr := e.recoverWith(t, id, state)
		if rerr != nil {
			t.Fatalf("round %d: Recover %s: %v", round, id, rerr)
		}
		e.sb = sb
		after := e.capture(t, st)
		switch {
		case sameTree(after.Entries, snap.Entries) == "":
			t.Logf("round %d (let go after %v): the restore finished (its Apply: %v)", round, delay, err)
		case sameTree(after.Entries, changed.Entries) == "":
			t.Logf("round %d (let go after %v): the restore was dropped (its Apply: %v)", round, delay, err)
		default:
			t.Fatalf("round %d (let go after %v, Apply: %v): the workspace is neither as before the restore nor the snapshot:\n%s", round, delay, err, sameTree(after.Entries, snap.Entries))
		}
		if out := e.shOK(t, `ls -a /workspace`); strings.Contains(out, ".airlock-restore") {
			t.Errorf("round %d: a staging directory was left behind:\n%s", round, out)
		}
	}
	// The reattached instance restores.
	if _, err := e.snapshotter(t).Apply(e.ctx, sandbox.ApplyRequest{Roots: []string{sandbox.Workspace}, Entries: snap.Entries}, st.get); err != nil {
		t.Fatalf("restore after the restart: %v", err)
	}
	if d := sameTree(e.capture(t, st).Entries, snap.Entries); d != "" {
		t.Fatalf("after a restore by the reattached instance the workspace differs:\n%s", d)
	}
	e.close(t, e.sb)
}
