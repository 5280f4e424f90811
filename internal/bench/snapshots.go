package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// Snapshot rows: the supervisor with a local snapshot store over the
// native driver. A workspace of 1,000 files / 50 MiB: the first snapshot,
// a snapshot after changing 10 files (incremental), a restore of 10
// changed files, a cold create to its first command, a fork to its first
// command; and a diff of a 10,000-file workspace with 10 files changed.
// Targets (issue 18): incremental ≤ 50 ms, restore ≤ 200 ms, diff ≤ 50 ms,
// fork ≤ 2× (cold create + restore).

const (
	snapFiles     = 1000
	snapFileBytes = 50 << 10
	diffFiles     = 10_000
)

// makeFiles is a python3 program that writes n files of size bytes of
// random content under /workspace/w (in 10 directories).
func makeFiles(n, size int) string {
	return fmt.Sprintf(`import os
for d in range(10):
    os.makedirs('/workspace/w/d%%d' %% d, exist_ok=True)
for i in range(%d):
    with open('/workspace/w/d%%d/f%%d' %% (i %% 10, i), 'wb') as f:
        f.write(os.urandom(%d))
`, n, size)
}

// change10 rewrites 10 of the files with new content.
const change10 = `import os, random
for i in random.sample(range(%d), 10):
    with open('/workspace/w/d%%d/f%%d' %% (i %% 10, i), 'wb') as f:
        f.write(os.urandom(%d))
`

func snapshotRows(ctx context.Context, o Options, drv sandbox.Driver, drvErr error, progress func(string, ...any)) []Row {
	rows := []Row{
		{Section: "snapshots", ID: "snapshots/first", What: "snapshot of a 1,000-file / 50 MiB workspace (everything sent)", Unit: UnitMS},
		{Section: "snapshots", ID: "snapshots/incremental", What: "snapshot again after changing 10 files (target ≤ 50 ms)", Unit: UnitMS},
		{Section: "snapshots", ID: "snapshots/restore", What: "restore after changing 10 files (target ≤ 200 ms)", Unit: UnitMS},
		{Section: "snapshots", ID: "snapshots/create", What: "cold create to its first command (exec true)", Unit: UnitMS},
		{Section: "snapshots", ID: "snapshots/fork", What: "fork of the 50 MiB snapshot to its first command (target ≤ 2× (create + restore of all))", Unit: UnitMS,
			Compare: []Comparison{{Baseline: "snapshots/create", Name: "create"}}},
		{Section: "snapshots", ID: "snapshots/diff", What: "diff of a 10,000-file workspace with 10 changed, snapshot to now (target ≤ 50 ms)", Unit: UnitMS},
	}
	failAll := func(err error) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	if drvErr != nil {
		return failAll(fmt.Errorf("the native driver cannot run here: %w", drvErr))
	}
	dir, err := os.MkdirTemp("", "airlock-bench-snap-")
	if err != nil {
		return failAll(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return failAll(err)
	}
	defer st.Close()
	snaps, err := snapshot.OpenLocal(dir + "/snapshots")
	if err != nil {
		return failAll(err)
	}
	cfg := supervisor.Config{Templates: []supervisor.Template{{Name: supervisor.DefaultTemplate, Driver: "native",
		Memory: 1 << 30, Disk: 512 << 20, Timeout: supervisor.Duration(60 * time.Second)}}}
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"native": drv}, Snapshots: snaps, Config: cfg})
	if err != nil {
		return failAll(err)
	}
	defer sup.Close(context.WithoutCancel(ctx))
	c := supervisor.Caller{KeyID: "bench", Quota: store.Quota{MaxSandboxes: 64, MaxSnapshots: 10_000, MaxSnapshotBytes: 64 << 30, MaxSnapshotFiles: 100_000},
		Rate: store.RateLimits{CreatesPerSecond: 1000, CreateBurst: 1000, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6, MaxInFlight: 64}}
	run := func(id, code string) error {
		res, err := sup.Exec(ctx, c, id, supervisor.ExecRequest{Code: code, Language: "python"})
		if err == nil && (res.ExitCode != 0 || res.Reason != sandbox.ReasonExit) {
			err = fmt.Errorf("the workload failed: %s %s", res.Reason, res.Message)
		}
		return err
	}
	set := func(i int, s series, err error) {
		if err != nil {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
			return
		}
		rows[i] = latencyRow(rows[i], s)
	}
	progress("snapshots: a 1,000-file / 50 MiB workspace")
	in, err := sup.Create(ctx, c, supervisor.CreateRequest{})
	if err != nil {
		return failAll(err)
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, in.ID) }()
	if err := run(in.ID, makeFiles(snapFiles, snapFileBytes)); err != nil {
		return failAll(err)
	}
	// The first snapshot: every file hashed and sent, once.
	var base snapshot.Info
	s, err := timeRuns(ctx, 1, 0, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		info, err := sup.Snapshot(ctx, c, in.ID, supervisor.SnapshotRequest{Name: "base"})
		base = info
		return time.Since(start), err
	})
	set(0, s, err)
	if base.ID == "" {
		return failAll(fmt.Errorf("the first snapshot failed: %s", rows[0].Detail))
	}
	// Files older than the racy window keep their digests in the agent.
	time.Sleep(100 * time.Millisecond)
	runs := max(3, o.PythonRuns)
	change := fmt.Sprintf(change10, snapFiles, snapFileBytes)
	s, err = timeRuns(ctx, runs, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		if err := run(in.ID, change); err != nil {
			return 0, err
		}
		start := time.Now()
		info, err := sup.Snapshot(ctx, c, in.ID, supervisor.SnapshotRequest{})
		d := time.Since(start)
		if err == nil {
			err = sup.DeleteSnapshot(ctx, c, "", info.ID)
		}
		return d, err
	})
	set(1, s, err)
	// Back to base, untimed, after the incremental runs' changes: each
	// timed restore then undoes its own 10 changed files.
	if _, err := sup.Restore(ctx, c, in.ID, supervisor.RestoreRequest{Snapshot: base.ID}); err != nil {
		rows[2].Status, rows[2].Detail = StatusFailed, err.Error()
	}
	s, err = timeRuns(ctx, runs, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		if err := run(in.ID, change); err != nil {
			return 0, err
		}
		start := time.Now()
		r, err := sup.Restore(ctx, c, in.ID, supervisor.RestoreRequest{Snapshot: base.ID})
		if err == nil && r.Stats.Changed != 10 {
			err = fmt.Errorf("the restore changed %d files, want 10", r.Stats.Changed)
		}
		return time.Since(start), err
	})
	if rows[2].Status != StatusFailed {
		set(2, s, err)
	}

	forkRuns := max(3, o.PythonRuns/3)
	progress("snapshots: %d cold creates and %d forks to the first command", forkRuns, forkRuns)
	s, err = timeRuns(ctx, forkRuns, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		nb, err := sup.Create(ctx, c, supervisor.CreateRequest{})
		if err != nil {
			return 0, err
		}
		defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, nb.ID) }()
		_, err = sup.Exec(ctx, c, nb.ID, supervisor.ExecRequest{Argv: trueArgv})
		return time.Since(start), err
	})
	set(3, s, err)
	s, err = timeRuns(ctx, forkRuns, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		fr, err := sup.Fork(ctx, c, supervisor.ForkRequest{Snapshot: base.ID})
		if err != nil {
			return 0, err
		}
		defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, fr.Sandbox.ID) }()
		_, err = sup.Exec(ctx, c, fr.Sandbox.ID, supervisor.ExecRequest{Argv: trueArgv})
		return time.Since(start), err
	})
	set(4, s, err)
	if rows[4].Status == StatusOK {
		rows[4].Detail = "fork = create + restore of every file (50 MiB sent)"
	}

	progress("snapshots: a diff of a 10,000-file workspace")
	db, err := sup.Create(ctx, c, supervisor.CreateRequest{})
	if err != nil {
		rows[5].Status, rows[5].Detail = StatusFailed, err.Error()
		return rows
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, db.ID) }()
	err = run(db.ID, makeFiles(diffFiles, 100))
	var dbase snapshot.Info
	if err == nil {
		dbase, err = sup.Snapshot(ctx, c, db.ID, supervisor.SnapshotRequest{})
	}
	if err == nil {
		time.Sleep(100 * time.Millisecond)
		err = run(db.ID, fmt.Sprintf(change10, diffFiles, 100))
	}
	if err != nil {
		rows[5].Status, rows[5].Detail = StatusFailed, err.Error()
		return rows
	}
	s, err = timeRuns(ctx, runs, 1, o.RowTime, func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		d, err := sup.Diff(ctx, c, db.ID, supervisor.DiffRequest{From: dbase.ID})
		if err == nil && d.Modified != 10 {
			err = errors.New("the diff found " + strconv.Itoa(d.Modified) + " modified files, want 10")
		}
		return time.Since(start), err
	})
	set(5, s, err)
	return rows
}
