package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/driver/microvm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// microvmPauseSizes are the guests of the microVM pause rows: the
// workload's memory limit (the guest has 128 MiB more) and what its
// Python process holds, in non-zero pages. The 1 GiB guest is left out
// of a quick run.
var microvmPauseSizes = []struct {
	name    string
	limit   int64
	holdMiB int
	long    bool
}{
	{"256m", 128 << 20, 64, false},
	{"1g", 896 << 20, 512, true},
}

// microvmPauseRowIDs are the ids of the pause rows, for the failed rows
// of a host without the driver.
func microvmPauseRowIDs() []string {
	var ids []string
	for _, s := range microvmPauseSizes {
		ids = append(ids, "microvm/pause-"+s.name, "microvm/pause-image-"+s.name, "microvm/resume-"+s.name)
	}
	return ids
}

// microvmPauseRows measures the microvm driver's pause (QEMU's migration
// of the machine to a file) and resume (a QEMU loading it, to the first
// command's exit), and the image's size, for guests holding most of
// their memory.
func microvmPauseRows(ctx context.Context, o Options, d *microvm.Driver, progress func(string, ...any)) []Row {
	var rows []Row
	for _, size := range microvmPauseSizes {
		pause := Row{Section: "microvm", ID: "microvm/pause-" + size.name, Unit: UnitMS,
			What: fmt.Sprintf("microvm pause of a %s guest holding %d MiB (QEMU migration to a file, in-process)", size.name, size.holdMiB)}
		image := Row{Section: "microvm", ID: "microvm/pause-image-" + size.name, Unit: UnitMiB,
			What: fmt.Sprintf("microvm pause image of a %s guest holding %d MiB", size.name, size.holdMiB)}
		resume := Row{Section: "microvm", ID: "microvm/resume-" + size.name, Unit: UnitMS,
			What:    fmt.Sprintf("microvm resume of a %s guest holding %d MiB to the first command's exit (in-process)", size.name, size.holdMiB),
			Compare: []Comparison{{Baseline: "microvm/snapshot", Name: "from a snapshot"}}}
		if size.long && o.Quick {
			for _, r := range []*Row{&pause, &image, &resume} {
				r.Status, r.Detail = StatusSkipped, "left out of a quick run"
			}
			rows = append(rows, pause, image, resume)
			continue
		}
		runs := 3
		if o.Quick || size.long {
			runs = 1
		}
		drv := d
		if size.long {
			// Booted cold: a machine restored from a snapshot pays twice
			// on the host for each page it writes first, which the 1 GiB
			// guest's fill would take past its host cgroup's limit.
			cd, err := microvm.New(microvm.Options{Cold: true})
			if err != nil {
				for _, r := range []*Row{&pause, &image, &resume} {
					r.Status, r.Detail = StatusFailed, err.Error()
				}
				rows = append(rows, pause, image, resume)
				continue
			}
			drv = cd
		}
		progress("microvm: %d pauses and resumes of a %s guest", runs, size.name)
		var ps, rs series
		var imgBytes int64
		for range runs {
			p, r, n, err := microvmPauseOnce(ctx, drv, size.limit, size.holdMiB)
			if ctx.Err() != nil {
				return rows
			}
			if err != nil {
				for _, s := range []*series{&ps, &rs} {
					s.fails++
					if s.firstErr == nil {
						s.firstErr = err
					}
				}
				continue
			}
			ps.samples, rs.samples, imgBytes = append(ps.samples, p), append(rs.samples, r), n
		}
		pause, resume = latencyRow(pause, ps), latencyRow(resume, rs)
		if pause.Status == StatusOK && imgBytes > 0 {
			mib := float64(imgBytes) / (1 << 20)
			image.Status, image.Value = StatusOK, &mib
			perGiB := pause.Stats.P50 / (float64(size.limit>>20+128) / 1024) / 1000
			pause.Detail = joinDetail(pause.Detail, fmt.Sprintf("%.2f s per GiB of guest, accel %s", perGiB, describeAccel(d)))
		} else {
			image.Status, image.Detail = StatusFailed, pause.Detail
		}
		rows = append(rows, pause, image, resume)
	}
	return rows
}

// microvmPauseOnce makes a sandbox whose Python process holds holdMiB,
// pauses it into a temporary directory, resumes it, runs /bin/true, and
// closes it: the pause's time, the resume's to the command's exit, and
// the image's bytes.
func microvmPauseOnce(ctx context.Context, d *microvm.Driver, limit int64, holdMiB int) (time.Duration, time.Duration, int64, error) {
	l := microvmLimits
	l.MemoryBytes = limit
	in, err := d.Create(ctx, sandbox.Spec{Limits: l})
	if err != nil {
		return 0, 0, 0, err
	}
	id := in.ID()
	defer func() { _ = in.Close(context.WithoutCancel(ctx)) }()
	hold := strings.ReplaceAll(`import os, time
data = bytearray(HOLD << 20)
for i in range(HOLD): data[i << 20:(i + 1) << 20] = os.urandom(1 << 20)
open('/tmp/held', 'w').close()
time.sleep(86400)
`, "HOLD", strconv.Itoa(holdMiB))
	if _, err := in.Start(ctx, sandbox.ExecRequest{Argv: []string{"python3", "-c", hold}, Background: true}); err != nil {
		return 0, 0, 0, err
	}
	wait := sandbox.ExecRequest{Argv: []string{"sh", "-c", "for i in $(seq 1200); do [ -e /tmp/held ] && exit 0; sleep 0.1; done; exit 1"}, Timeout: 3 * time.Minute}
	switch res, err := sandbox.Run(ctx, in, wait); {
	case err != nil:
		return 0, 0, 0, fmt.Errorf("the process did not fill its memory: %w", err)
	case res.ExitCode != 0:
		return 0, 0, 0, fmt.Errorf("the process did not fill its memory in 2 minutes: %+v", res)
	}
	dir, err := os.MkdirTemp("", "airlock-bench-pause-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	st, back, err := d.Pause(ctx, in, dir)
	pause := time.Since(t0)
	if err != nil {
		if back != nil {
			in = back
		}
		return 0, 0, 0, err
	}
	var n int64
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
				n += fi.Size()
			}
		}
	}
	t0 = time.Now()
	in2, err := d.Resume(ctx, id, st, dir)
	if err != nil {
		return 0, 0, 0, err
	}
	in = in2
	res, err := sandbox.Run(ctx, in2, sandbox.ExecRequest{Argv: []string{"/bin/true"}, Timeout: time.Minute})
	resume := time.Since(t0)
	if err == nil && res.ExitCode != 0 {
		err = errors.New("/bin/true failed after the resume")
	}
	return pause, resume, n, err
}
