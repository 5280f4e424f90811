package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/gvisor"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// The pause rows: a gVisor sandbox of 256 MiB and of 1 GiB, a background
// Python process holding three quarters of it (written, not zero), paused
// through the supervisor (runsc checkpoint and the image's digests) and
// resumed to its first exec; the image's size is the stored bytes. The
// issue's targets: a pause ≤ 2 s per GiB, a resume to a first exec ≤ 0.5 s
// (256 MiB). E2B publishes about 4 s per GB to pause and about 1 s to
// resume.

// pauseSizes are the sandboxes' memory sizes the rows measure.
var pauseSizes = []struct {
	name string
	mem  int64
}{{"256m", 256 << 20}, {"1g", 1 << 30}}

// holdCode keeps about %d MiB written in memory and says so in /tmp/held.
const holdCode = `import time
data = bytearray(%d << 20)
chunk = bytes(range(256)) * 4096
for i in range(len(data) >> 20): data[i << 20:(i + 1) << 20] = chunk
open('/tmp/held', 'w').write('ok')
while True: time.sleep(3600)
`

func pauseRows(ctx context.Context, o Options, progress func(string, ...any)) []Row {
	var rows []Row
	for _, sz := range pauseSizes {
		rows = append(rows,
			Row{Section: "pause", ID: "pause/gvisor-" + sz.name, Unit: UnitMS,
				What: fmt.Sprintf("gVisor pause of a %s sandbox holding %d MiB, to its image on disk with its digests (target ≤ 2 s per GiB; E2B ≈ 4 s per GB)", sz.name, sz.mem*3/4>>20)},
			Row{Section: "pause", ID: "pause/gvisor-" + sz.name + "-resume", Unit: UnitMS,
				What: "gVisor resume of it to its first exec (target ≤ 0.5 s at 256 MiB; E2B ≈ 1 s)"},
			Row{Section: "pause", ID: "pause/gvisor-" + sz.name + "-stored", Unit: UnitMiB,
				What: "bytes its pause image stores"},
		)
	}
	failAll := func(err error) []Row {
		for i := range rows {
			rows[i].Status, rows[i].Detail = StatusFailed, err.Error()
		}
		return rows
	}
	drv, err := gvisor.New(gvisor.Options{Persistent: true})
	if err == nil {
		err = drv.Probe(ctx)
	}
	if err != nil {
		return failAll(fmt.Errorf("the gvisor driver cannot run here: %w", err))
	}
	dir, err := os.MkdirTemp("", "airlock-bench-pause-")
	if err != nil {
		return failAll(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, time.Second)
	if err != nil {
		return failAll(err)
	}
	defer st.Close()
	var tmpls []supervisor.Template
	for _, sz := range pauseSizes {
		tmpls = append(tmpls, supervisor.Template{Name: "p" + sz.name, Driver: "gvisor", Memory: supervisor.Size(sz.mem), Disk: 512 << 20,
			Timeout: supervisor.Duration(60 * time.Second)})
	}
	tmpls = append(tmpls, supervisor.Template{Name: supervisor.DefaultTemplate, Driver: "gvisor"})
	sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: map[string]sandbox.Driver{"gvisor": drv},
		Config: supervisor.Config{StateDir: dir, Templates: tmpls}})
	if err != nil {
		return failAll(err)
	}
	defer sup.Close(context.WithoutCancel(ctx))
	c := supervisor.Caller{KeyID: "bench", Quota: store.Quota{MaxSandboxes: 8, MaxMemoryBytes: 8 << 30},
		Rate: store.RateLimits{CreatesPerSecond: 100, CreateBurst: 100, ExecsPerSecond: 1e6, ExecBurst: 1e6, FilesPerSecond: 1e6, FileBurst: 1e6, MaxInFlight: 64}}
	runs := 3
	if o.Quick {
		runs = 1
	}
	for i, sz := range pauseSizes {
		progress("pause: a %s gVisor sandbox, %d pauses and resumes", sz.name, runs)
		pauseS, resumeS, stored, err := pauseOne(ctx, sup, c, "p"+sz.name, sz.mem*3/4>>20, runs)
		r := rows[3*i : 3*i+3]
		if err != nil && len(pauseS.samples) == 0 {
			for j := range r {
				r[j].Status, r[j].Detail = StatusFailed, err.Error()
			}
			continue
		}
		r[0], r[1] = latencyRow(r[0], pauseS), latencyRow(r[1], resumeS)
		mib := float64(stored) / (1 << 20)
		r[2].Status, r[2].Value = StatusOK, &mib
		if err != nil {
			r[0].Detail = "a run failed: " + err.Error()
		}
	}
	return rows
}

// pauseOne makes a sandbox of template tmpl holding held MiB, pauses and
// resumes it runs times, and returns the times and the image's bytes.
func pauseOne(ctx context.Context, sup *supervisor.Supervisor, c supervisor.Caller, tmpl string, held int64, runs int) (pauseS, resumeS series, stored int64, err error) {
	in, err := sup.Create(ctx, c, supervisor.CreateRequest{Template: tmpl})
	if err != nil {
		return pauseS, resumeS, 0, err
	}
	defer func() { _ = sup.Kill(context.WithoutCancel(ctx), c, in.ID) }()
	if _, err := sup.StartProcess(ctx, c, in.ID, supervisor.StartRequest{ExecRequest: supervisor.ExecRequest{Code: fmt.Sprintf(holdCode, held), Language: "python"}}); err != nil {
		return pauseS, resumeS, 0, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var out bytes.Buffer
		res, err := sup.Exec(ctx, c, in.ID, supervisor.ExecRequest{Argv: []string{"cat", "/tmp/held"}, Stdout: &out})
		if err == nil && res.ExitCode == 0 && strings.TrimSpace(out.String()) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			return pauseS, resumeS, 0, fmt.Errorf("the sandbox did not fill %d MiB in 2 minutes", held)
		}
	}
	for range runs {
		t0 := time.Now()
		p, err := sup.Pause(ctx, c, in.ID)
		if err != nil {
			return pauseS, resumeS, stored, err
		}
		pauseS.samples = append(pauseS.samples, time.Since(t0))
		if p.Paused != nil {
			stored = p.Paused.Bytes
		}
		t0 = time.Now()
		if _, err := sup.Resume(ctx, c, in.ID); err != nil {
			return pauseS, resumeS, stored, err
		}
		res, err := sup.Exec(ctx, c, in.ID, supervisor.ExecRequest{Argv: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exec true after the resume: %s %s", res.Reason, res.Message)
		}
		if err != nil {
			return pauseS, resumeS, stored, err
		}
		resumeS.samples = append(resumeS.samples, time.Since(t0))
	}
	return pauseS, resumeS, stored, nil
}
