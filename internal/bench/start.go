package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The baselines' command lines, as shared/research/baselines.md measured
// them.
var (
	// unshareArgs creates the namespaces a sandbox has (user, pid, mount,
	// net, ipc, uts) and nothing else: no mounts, no cgroups.
	unshareArgs = []string{"unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net", "--ipc", "--uts"}
	// bwrapArgs is a typical agent profile: /usr read-only, proc, dev,
	// tmpfs /tmp, every namespace unshared.
	bwrapArgs = []string{"bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--new-session"}
	// runscArgs runs a command in gVisor over the host's root, no network.
	runscArgs = []string{"runsc", "--network=none", "do"}
)

// microvmArgs are `airlock run`'s flags for the microVM rows' sandboxes: a
// 256 MiB guest with one vCPU, as the driver's tests use.
var microvmArgs = []string{"--driver", "microvm", "--memory", "128M", "--cpus", "1"}

// Workloads of the start test. The system python, not a version
// manager's shim (a pyenv shim is a bash script).
var (
	trueArgv   = []string{"/bin/true"}
	pythonArgv = []string{"/usr/bin/python3", "-c", "print(1)"}
)

// Install commands for what the bench runs.
const (
	fixBwrap   = "apt-get install bubblewrap"
	fixUnshare = "apt-get install util-linux"
	fixRunsc   = "apt-get install runsc"
	fixPython  = "apt-get install python3"
)

// Launcher ids: the last part of a start row's id.
const (
	idForkExec       = "fork-exec"
	idUnshare        = "unshare"
	idBwrap          = "bwrap"
	idAirlockNative  = "airlock-native"
	idAirlockGVisor  = "airlock-gvisor"
	idRunsc          = "runsc-do"
	idAirlockMicroVM = "airlock-microvm"
	idQEMU           = "qemu"
)

// launcher is one way to start a command.
type launcher struct {
	id   string
	what string
	// prefix goes before the workload's argv; nil runs it directly.
	prefix []string
	// fix installs prefix[0] when it is missing.
	fix string
	// compare names the launchers this one is set beside.
	compare []string
	// notBuilt, when set, says which part of airlock does not exist yet.
	notBuilt string
	// missing, when set, reports the launcher as missing with this fix
	// without looking anything up.
	missing string
	// failed, when set, reports the launcher as failed with this reason.
	failed string
	// alone says prefix is the whole command: the launcher runs no
	// workload (a bare boot).
	alone bool
}

// launchers lists the start rows in table order.
func (o Options) launchers(qemu toolVersion, bare []string, bareErr string) []launcher {
	ls := []launcher{
		{id: idForkExec, what: "fork/exec (the floor)"},
		{id: idUnshare, what: "unshare user,pid,mount,net,ipc,uts", prefix: unshareArgs, fix: fixUnshare, compare: []string{idForkExec}},
		{id: idBwrap, what: "bwrap (agent profile)", prefix: bwrapArgs, fix: fixBwrap, compare: []string{idForkExec}},
		{id: idAirlockNative, what: "airlock run, native driver (whole CLI)", prefix: []string{o.Airlock, "run", "--"}, compare: []string{idBwrap, idForkExec}},
		{id: idAirlockGVisor, what: "airlock run, gvisor driver (whole CLI)", prefix: []string{o.Airlock, "run", "--driver", "gvisor", "--"}, compare: []string{idRunsc, idBwrap}},
		{id: idRunsc, what: "runsc --network=none do (bare gVisor, the runsc airlock uses)", prefix: runscPrefix(), fix: fixRunsc, compare: []string{idForkExec}},
		{id: idAirlockMicroVM, what: "airlock run, microvm driver, 256 MiB guest (whole CLI)", prefix: append(append([]string{o.Airlock, "run"}, microvmArgs...), "--"), compare: []string{idQEMU}},
	}
	q := launcher{id: idQEMU, what: "bare QEMU boot of the microvm guest to its init and out (no command runs)", alone: true}
	if qemu.version == "" {
		q.missing = qemu.fix
	} else {
		q.prefix, q.failed = bare, bareErr
	}
	return append(ls, q)
}

// workload is one command the start test runs.
type workload struct {
	section string
	label   string
	argv    []string
	runs    int
}

// startRows times every launcher starting every workload.
func startRows(ctx context.Context, o Options, qemu toolVersion, progress func(string, ...any)) ([]Row, error) {
	works := []workload{
		{section: "start/true", label: "/bin/true", argv: trueArgv, runs: o.TrueRuns},
		{section: "start/python", label: "python3", argv: pythonArgv, runs: o.PythonRuns},
	}
	var bare []string
	var bareErr string
	if qemu.version != "" {
		bare, bareErr = bareBoot(ctx)
	}
	var rows []Row
	for _, wl := range works {
		_, pyErr := os.Stat(wl.argv[0])
		for _, l := range o.launchers(qemu, bare, bareErr) {
			row := Row{Section: wl.section, ID: wl.section + "/" + l.id, What: l.what, Unit: UnitMS}
			for _, c := range l.compare {
				row.Compare = append(row.Compare, Comparison{Baseline: wl.section + "/" + c, Name: launcherName(c)})
			}
			switch {
			case l.notBuilt != "":
				row.Status, row.Detail = StatusNotBuilt, l.notBuilt
			case l.missing != "":
				row.Status, row.Detail = StatusMissing, l.missing
			case l.failed != "":
				row.Status, row.Detail = StatusFailed, l.failed
			case pyErr != nil:
				row.Status, row.Detail = StatusMissing, fixPython
			default:
				argv, status, detail := resolve(l)
				if status != StatusOK {
					row.Status, row.Detail = status, detail
					break
				}
				progress("start %s: %s, %d runs", wl.label, l.id, wl.runs)
				cmd := append(argv, wl.argv...)
				if l.alone {
					cmd = argv
				}
				var err error
				if row, err = timeCommand(ctx, o, row, cmd, wl.runs); err != nil {
					return rows, err
				}
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// resolve finds the launcher's program and returns its full command line
// prefix, or why it cannot run.
func resolve(l launcher) ([]string, Status, string) {
	if len(l.prefix) == 0 {
		return nil, StatusOK, ""
	}
	argv := append([]string(nil), l.prefix...)
	if argv[0] == "" {
		return nil, StatusFailed, "no airlock binary to run"
	}
	if filepath.IsAbs(argv[0]) {
		if _, err := os.Stat(argv[0]); err != nil {
			return nil, StatusFailed, fmt.Sprintf("find %s: %v", argv[0], err)
		}
		return argv, StatusOK, ""
	}
	p, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, StatusMissing, l.fix
	}
	argv[0] = p
	return argv, StatusOK, ""
}

// timeCommand times argv as one-shot runs and fills in row.
func timeCommand(ctx context.Context, o Options, row Row, argv []string, runs int) (Row, error) {
	w, err := newCmdWorker(o.runTimeout())
	if err != nil {
		return row, err
	}
	defer w.close()
	s, err := timeRuns(ctx, runs, warmups(runs), o.RowTime, func(ctx context.Context) (time.Duration, error) {
		return w.run(ctx, argv)
	})
	if err != nil {
		return row, err
	}
	return latencyRow(row, s), nil
}

// warmups is how many untimed runs go before runs timed ones.
func warmups(runs int) int { return max(2, runs/20) }

// launcherName is a launcher's short name in the baseline column.
func launcherName(id string) string {
	switch id {
	case idForkExec:
		return "fork/exec"
	case idAirlockNative:
		return "airlock"
	case idRunsc:
		return "runsc do"
	}
	return strings.TrimPrefix(id, "airlock-")
}
