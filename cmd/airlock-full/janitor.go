package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The janitor: what a sandbox's holder cannot remove once it has ended the
// sandbox by itself (its time to live ran out while no daemon was
// attached: docs/decisions.md, 51) is on the host, root's: the native
// sandbox's cgroups, lock and session socket; the gVisor sandbox's
// cgroup, bundle and mounts. One small process per host removes them
// (the drivers' own Sweep, which removes what sandboxes whose lock no
// live process holds left), every janitorInterval, for as long as a
// daemon runs or a sandbox's holder does. A daemon starts it; it outlives
// the daemon; it exits once neither is left.

// janitorDrivers are the drivers whose sandboxes' holders run on the host
// and leave what only root removes: Docker's and Kubernetes' engines
// remove a container or Pod whose agent has ended it.
var janitorDrivers = []string{"native", "gvisor"}

// janitorInterval is how often the janitor sweeps.
const janitorInterval = 2 * time.Second

// runtimeDir is the drivers' state directory (agentdriver.Shared.StateDir).
const runtimeDir = "/run/airlock"

func init() { cli.RegisterCommand(newJanitorCmd) }

func newJanitorCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "janitor DRIVER...",
		Short:  "Remove what sandboxes that ended by themselves left (started by airlock serve)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return janitor(cmd.Context(), args)
		},
	}
}

// janitor sweeps the drivers named while a daemon runs or a sandbox's
// holder does, one janitor per host.
func janitor(ctx context.Context, names []string) error {
	lock, err := hostlock.Take(runtimeDir, "janitor")
	if errors.Is(err, sandbox.ErrExists) {
		return nil // another one sweeps
	}
	if err != nil {
		return err
	}
	var sweepers []interface{ Sweep(context.Context) error }
	for _, e := range cli.DriverTable {
		if !slices.Contains(names, e.Name) || !slices.Contains(janitorDrivers, e.Name) {
			continue
		}
		d, err := e.New(cli.DriverOptions{Logger: slog.New(slog.DiscardHandler), Instance: "janitor"})
		if err != nil {
			continue
		}
		if s, ok := d.(interface{ Sweep(context.Context) error }); ok {
			sweepers = append(sweepers, s)
		}
	}
	for {
		time.Sleep(janitorInterval)
		for _, s := range sweepers {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			_ = s.Sweep(sctx)
			cancel()
		}
		if daemonRuns() || holdersRun() {
			continue
		}
		// Nothing left to wait for: let go, and go on after all if a
		// daemon started meanwhile and found this janitor still there.
		lock.Drop()
		if !daemonRuns() {
			return nil
		}
		if lock, err = hostlock.Take(runtimeDir, "janitor"); err != nil {
			return nil
		}
	}
}

// daemonRuns says whether an airlock serve runs on this host (it holds
// serve.lock shared: see holdServe).
func daemonRuns() bool {
	f, err := os.Open(filepath.Join(runtimeDir, "serve.lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// holdersRun says whether a sandbox's holder runs: a live process holds a
// sandbox's lock.
func holdersRun() bool {
	dir := hostlock.SandboxDir(runtimeDir)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok && hostlock.Held(dir, id) {
			return true
		}
	}
	return false
}

// startJanitor marks this process as a running daemon (serve.lock, held
// shared until it exits) and starts the janitor of drivers unless one
// runs. The janitor outlives the daemon: kill -9 of the daemon leaves it
// sweeping after the sandboxes that end by themselves.
func startJanitor(log *slog.Logger, drivers map[string]sandbox.Driver) {
	var names []string
	for _, n := range janitorDrivers {
		if drivers[n] != nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 || os.Geteuid() != 0 {
		return
	}
	if err := os.MkdirAll(runtimeDir, 0o711); err != nil {
		log.Warn("start the janitor", "err", err)
		return
	}
	f, err := os.OpenFile(filepath.Join(runtimeDir, "serve.lock"), os.O_RDONLY|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH)
	}
	if err != nil {
		log.Warn("start the janitor", "err", err)
		return
	}
	heldServe = f
	if hostlock.Held(runtimeDir, "janitor") {
		return
	}
	self, err := os.Executable()
	if err != nil {
		log.Warn("start the janitor", "err", err)
		return
	}
	cmd := exec.Command(self, append([]string{"janitor"}, names...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		log.Warn("start the janitor", "err", fmt.Errorf("%s janitor: %w", self, err))
		return
	}
	go func() { _ = cmd.Wait() }()
}

// heldServe is serve.lock, held for the daemon's life.
var heldServe *os.File //nolint:unused // held, never read: holding the lock is the point
