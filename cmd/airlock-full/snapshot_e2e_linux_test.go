package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestSnapshotCLI drives the snapshot verbs of the CLI against a real
// daemon (native driver): snapshot, ls, diff, a transactional exec,
// restore, fork, rm.
func TestSnapshotCLI(t *testing.T) {
	requireE2E(t)
	dir := t.TempDir()
	key := newKey(t, dir, "agent")
	d := startDaemon(t, dir)
	env := []string{"AIRLOCK_URL=" + d.url, "AIRLOCK_API_KEY=" + key}
	cli := func(args ...string) outcomeOf {
		t.Helper()
		return airlockRun(t, invocation{args: args, env: env})
	}
	must := func(args ...string) string {
		t.Helper()
		o := cli(args...)
		if o.code != 0 {
			t.Fatalf("airlock %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), o.code, o.stdout, o.stderr)
		}
		return o.stdout
	}
	id := strings.TrimSpace(must("sandbox", "create", "--checkpoints", "4"))
	must("sandbox", "exec", id, "--", "sh", "-c", "mkdir src && printf 'one\\ntwo\\n' > src/a.txt")
	snap := strings.TrimSpace(must("sandbox", "snapshot", "--name", "base", "--label", "first", id))
	if !strings.HasPrefix(snap, "sn-") {
		t.Fatalf("snapshot printed %q", snap)
	}
	if o := cli("sandbox", "snapshot", "--name", "../x", id); o.code == 0 || !strings.Contains(o.stderr, "snapshot name") {
		t.Errorf("a path as a name: %d %s", o.code, o.stderr)
	}
	must("sandbox", "exec", id, "--", "sh", "-c", "printf 'one\\nTWO\\n' > src/a.txt && echo new > src/b.txt")
	out := must("sandbox", "diff", id, "base")
	for _, want := range []string{"1 added, 0 deleted, 1 modified", "added    /workspace/src/b.txt", "-two\n+TWO\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	// A failing transactional exec: its change is undone, and it says so.
	o := cli("sandbox", "exec", "--rollback", "on_failure", id, "--", "sh", "-c", "rm src/a.txt; exit 7")
	if o.code != 7 || !strings.Contains(o.stderr, "rolled back (exit code 7)") {
		t.Fatalf("transactional exec: %d %q", o.code, o.stderr)
	}
	if got := must("sandbox", "exec", id, "--", "cat", "src/a.txt"); got != "one\nTWO\n" {
		t.Fatalf("after the rollback: %q", got)
	}
	if out := must("sandbox", "diff", "--step", "2", id); !strings.Contains(out, "modified /workspace/src/a.txt") {
		t.Errorf("diff --step 2:\n%s", out)
	}
	if out := must("sandbox", "restore", id, "base"); !strings.Contains(out, "restored "+snap+": 0 added, 1 changed, 1 removed") {
		t.Errorf("restore: %q", out)
	}
	if got := must("sandbox", "exec", id, "--", "sh", "-c", "cat src/a.txt; ls src"); got != "one\ntwo\na.txt\n" {
		t.Fatalf("after the restore: %q", got)
	}
	must("sandbox", "exec", id, "--", "sh", "-c", "echo three >> src/a.txt")
	if out := must("sandbox", "restore", "--undo", "1", id); !strings.Contains(out, "1 changed") {
		t.Errorf("restore --undo 1: %q", out)
	}
	fork := strings.TrimSpace(must("sandbox", "fork", id, "base"))
	if got := must("sandbox", "exec", fork, "--", "cat", "src/a.txt"); got != "one\ntwo\n" {
		t.Fatalf("the fork's file: %q", got)
	}
	ls := must("sandbox", "snapshot", "ls", id)
	if !strings.Contains(ls, snap) || !strings.Contains(ls, "base") || !strings.Contains(ls, "checkpoint") {
		t.Errorf("snapshot ls:\n%s", ls)
	}
	must("sandbox", "snapshot", "rm", snap)
	if o := cli("sandbox", "restore", id, snap); o.code == 0 || !strings.Contains(o.stderr, "not_found") && !strings.Contains(o.stderr, "not found") {
		t.Errorf("restore of a deleted snapshot: %d %s", o.code, o.stderr)
	}
}

// TestSnapshotDaemonKill9DuringRestore kills the daemon (SIGKILL) while it
// restores a sandbox. The sandbox either outlives the daemon, and then
// its workspace is as before the restore or as the snapshot, never a mix;
// or (a driver whose sandboxes die with the daemon) it is recorded lost,
// and the snapshot is whole: a fork of it holds exactly its files.
func TestSnapshotDaemonKill9DuringRestore(t *testing.T) {
	requireE2E(t)
	subreaper(t)
	dir := t.TempDir()
	key := newKey(t, dir, "agent")
	d := startDaemon(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(d.url, key)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	write := `python3 -c "import os; [open('/workspace/f%d' % i, 'wb').write(os.urandom(50000)) for i in range(400)]"`
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", write}}); err != nil {
		t.Fatal(err)
	}
	target, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{Name: "target"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", write + " && mkdir /workspace/later"}}); err != nil {
		t.Fatal(err)
	}
	before, err := c.Snapshot(ctx, sb.ID, client.SnapshotRequest{Name: "before"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = c.Restore(ctx, sb.ID, client.RestoreRequest{Snapshot: target.ID}) }()
	time.Sleep(40 * time.Millisecond)
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d2 := startDaemon(t, dir)
	c2, err := client.New(d2.url, key)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c2.GetSandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State == client.StateRunning {
		// The sandbox outlived the daemon: its workspace is one of the two.
		var clean []string
		for _, s := range []*client.Snapshot{before, target} {
			d, err := c2.Diff(ctx, sb.ID, client.DiffOptions{From: s.ID})
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Changes) == 0 {
				clean = append(clean, s.Name)
			}
		}
		if len(clean) != 1 {
			t.Fatalf("after the daemon's kill the workspace is neither as before nor as the snapshot (it matches %v)", clean)
		}
		t.Logf("the sandbox outlived the daemon; its workspace is %q", clean[0])
		return
	}
	t.Logf("the sandbox is %s (%s): its workspace ended with it", info.State, info.EndReason)
	fr, err := c2.Fork(ctx, target.ID, client.ForkRequest{})
	if err != nil {
		t.Fatalf("fork of the snapshot after the kill: %v", err)
	}
	diff, err := c2.Diff(ctx, fr.Sandbox.ID, client.DiffOptions{From: target.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(diff.Changes) != 0 {
		t.Fatalf("the fork of the snapshot differs from it: %+v", diff.Changes[0])
	}
}

// TestServeRestartSnapshots is the fault test of snapshots across a daemon
// killed with SIGKILL: the snapshots in STATE/snapshots outlive it, the
// reattached sandbox restores and snapshots, its checkpoint steps go on
// from where they were, undo works across the restart, and a
// transactional exec the killed daemon was running is rolled back by the
// next one when it fails, its result saying so, its snapshot gone after.
func TestServeRestartSnapshots(t *testing.T) {
	t.Parallel() // beside the other fault tests, after the package's other tests (faultParallel)
	faultDrivers(t, func(t *testing.T, driver string) {
		t.Parallel() // its two drivers side by side, as TestServeRestart's
		f := newFault(t, driver, "")
		f.start()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		id := f.create(ctx, client.CreateRequest{Checkpoints: 3})
		f.sh(ctx, id, "echo one > a.txt")            // step 1
		f.sh(ctx, id, "mkdir d && echo b > d/b.txt") // step 2
		base, err := f.c.Snapshot(ctx, id, client.SnapshotRequest{Name: "base"})
		if err != nil {
			t.Fatal(err)
		}
		f.sh(ctx, id, "echo two > a.txt; ln -s a.txt link") // step 3
		// A transactional exec in a sandbox without checkpoints, running
		// when the daemon dies.
		tx := f.create(ctx, client.CreateRequest{})
		if err := f.c.WriteFile(ctx, tx, "/workspace/kept.txt", strings.NewReader("kept\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		started := make(chan string, 1)
		go func() {
			for ev, err := range f.c.ExecEvents(ctx, tx, client.ExecRequest{Argv: []string{"sh", "-c", "echo partial > p.txt; rm kept.txt; sleep 2; exit 1"}, Rollback: client.RollbackOnFailure}) {
				if err != nil {
					return
				}
				if ev.Type == "start" {
					started <- ev.ID
				}
			}
		}()
		var txExec string
		select {
		case txExec = <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the transactional exec did not start")
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, err := f.c.Stat(ctx, tx, "/workspace/p.txt"); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the transactional exec wrote nothing: %v", err)
			}
		}
		preExec := func() []string {
			var ids []string
			ms, _ := filepath.Glob(filepath.Join(f.dir, "snapshots", "snapshots", "*.json"))
			for _, m := range ms {
				var in client.Snapshot
				if b, err := os.ReadFile(m); err == nil && json.Unmarshal(b, &in) == nil && in.Kind == "pre_exec" {
					ids = append(ids, in.ID)
				}
			}
			return ids
		}
		if len(preExec()) != 1 {
			t.Fatalf("a running transactional exec has %d pre_exec snapshots in STATE/snapshots; want 1", len(preExec()))
		}

		f.kill9()
		f.start()

		sb, err := f.c.GetSandbox(ctx, id)
		if err != nil || sb.State != client.StateRunning {
			t.Fatalf("after the restart the sandbox is %+v, %v; want running", sb, err)
		}
		if sb.Steps != 3 {
			t.Errorf("after the restart the sandbox counts %d steps; want 3", sb.Steps)
		}
		list, err := f.c.ListSnapshots(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list {
			names = append(names, s.Name)
		}
		if strings.Join(names, " ") != "step-1 step-2 base step-3" {
			t.Errorf("after the restart the sandbox's snapshots are %v; want step-1 step-2 base step-3", names)
		}
		// The transactional exec ran on, failed, and the new daemon
		// rolled it back.
		var p *client.Process
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if p, err = f.c.ExecResult(ctx, tx, txExec); err != nil {
				t.Fatalf("the result of the transactional exec after the restart: %v", err)
			}
			if !p.Running || time.Now().After(deadline) {
				break
			}
		}
		if p.Result == nil || p.Result.ExitCode != 1 || p.Result.Rollback == nil || !p.Result.Rollback.RolledBack || p.Result.Rollback.Added != 1 || p.Result.Rollback.Removed != 1 {
			t.Errorf("the transactional exec after the restart: %+v, result %+v; want exit 1, rolled back (1 added, 1 removed)", p, p.Result)
		} else {
			t.Logf("rolled back after the restart: %+v", *p.Result.Rollback)
		}
		if ls, err := f.c.ListFiles(ctx, tx, "/workspace"); err != nil || len(ls) != 1 || ls[0].Name != "kept.txt" {
			t.Errorf("after the rollback /workspace holds %+v, %v; want kept.txt alone", ls, err)
		}
		if ids := preExec(); len(ids) != 0 {
			t.Errorf("the transactional exec's snapshot %v is still in STATE/snapshots after its rollback", ids)
		}
		// Restore the named snapshot, and diff it.
		if _, err := f.c.Restore(ctx, id, client.RestoreRequest{Snapshot: "base"}); err != nil {
			t.Fatalf("restore after the restart: %v", err)
		}
		if r := f.sh(ctx, id, "cat a.txt; ls"); string(r.Stdout) != "one\na.txt\nd\n" { // step 4
			t.Errorf("after restoring base: %q", r.Stdout)
		}
		if d, err := f.c.Diff(ctx, id, client.DiffOptions{From: base.ID}); err != nil || len(d.Changes) != 0 {
			t.Errorf("diff of base to now after restoring it: %+v, %v", d, err)
		}
		// The steps go on: step 5 has a checkpoint of its own, and undo
		// of the last two steps is the workspace before step 4.
		f.sh(ctx, id, "echo five > a.txt") // step 5
		if sb, _ := f.c.GetSandbox(ctx, id); sb == nil || sb.Steps != 5 {
			t.Errorf("steps after two more commands: %+v; want 5", sb)
		}
		if d, err := f.c.Diff(ctx, id, client.DiffOptions{Step: 5}); err != nil || len(d.Changes) != 1 || d.Changes[0].Path != "/workspace/a.txt" {
			t.Errorf("what step 5 changed: %+v, %v; want a.txt", d, err)
		}
		if _, err := f.c.Restore(ctx, id, client.RestoreRequest{UndoSteps: 2}); err != nil {
			t.Fatalf("undo of two steps after the restart: %v", err)
		}
		if b, err := f.c.ReadFile(ctx, id, "/workspace/a.txt"); err != nil || string(b) != "one\n" {
			t.Errorf("after undoing steps 4 and 5 a.txt reads %q, %v; want the file before step 4 (base's)", b, err)
		}
		// A new snapshot of the reattached sandbox, and a fork of it.
		if _, err := f.c.Snapshot(ctx, id, client.SnapshotRequest{Name: "after"}); err != nil {
			t.Fatalf("snapshot after the restart: %v", err)
		}
		fr, err := f.c.Fork(ctx, base.ID, client.ForkRequest{})
		if err != nil {
			t.Fatalf("fork of a snapshot taken before the restart: %v", err)
		}
		if b, err := f.c.ReadFile(ctx, fr.Sandbox.ID, "/workspace/d/b.txt"); err != nil || string(b) != "b\n" {
			t.Errorf("the fork's d/b.txt: %q, %v", b, err)
		}
		ids := []string{id, tx, fr.Sandbox.ID}
		for _, sid := range ids {
			if err := f.c.DeleteSandbox(ctx, sid); err != nil {
				t.Fatal(err)
			}
		}
		noLeftovers(t, "after DELETE", ids)
	})
}
