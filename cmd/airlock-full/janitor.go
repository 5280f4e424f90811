package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/driver/agentdriver"
	"github.com/airlock-sandbox/airlock/internal/hostlock"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The janitor: what a sandbox's holder cannot remove once it has ended the
// sandbox by itself (its time to live ran out while no daemon was
// attached: docs/decisions.md, 51). On the host it is root's: the native
// sandbox's cgroups, lock and session socket; the gVisor sandbox's cgroup,
// bundle and mounts. In a cluster, the ended Pod. One small process per
// daemon removes them (the native and gVisor drivers' own Sweep, which
// removes what sandboxes whose lock no live process holds left; the
// Kubernetes driver's SweepEnded), every janitorInterval, for as long as
// its daemon runs or a sandbox's holder does. The daemon starts it; it
// outlives the daemon; it exits once neither is left.

// janitorDrivers are the drivers whose sandboxes leave something once
// their agent has ended them: on the host, what only root removes (native,
// gVisor); in a cluster, the ended Pod. Docker's engine removes a
// container whose agent has ended it.
var janitorDrivers = []string{"native", "gvisor", "kubernetes"}

// janitorInterval is how often the janitor sweeps.
const janitorInterval = 2 * time.Second

// runtimeDir is the drivers' state directory (agentdriver.Shared.StateDir).
const runtimeDir = agentdriver.DefaultStateDir

func init() { cli.RegisterCommand(newJanitorCmd) }

func newJanitorCmd() *cobra.Command {
	var instance string
	cmd := &cobra.Command{
		Use:    "janitor --instance INSTANCE DRIVER...",
		Short:  "Remove what sandboxes that ended by themselves left (started by airlock serve)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return janitor(cmd.Context(), instance, args)
		},
	}
	cmd.Flags().StringVar(&instance, "instance", "", "the daemon's instance (cli.DaemonInstance)")
	return cmd
}

// lockName is the name of a lock of the daemon instance below runtimeDir.
func lockName(what, instance string) string {
	sum := sha256.Sum256([]byte(instance))
	return what + "-" + hex.EncodeToString(sum[:6])
}

// janitor sweeps the drivers named while the daemon of instance runs or a
// sandbox's holder does: one janitor per daemon instance.
func janitor(ctx context.Context, instance string, names []string) error {
	name := lockName("janitor", instance)
	lock, err := hostlock.Take(runtimeDir, name)
	if errors.Is(err, sandbox.ErrExists) {
		return nil // another one sweeps
	}
	if err != nil {
		return err
	}
	var sweepers []interface{ Sweep(context.Context) error }
	var pods []interface {
		SweepEnded(context.Context) (bool, error)
	}
	for _, e := range cli.DriverTable {
		if !slices.Contains(names, e.Name) || !slices.Contains(janitorDrivers, e.Name) {
			continue
		}
		d, err := e.New(cli.DriverOptions{Logger: slog.New(slog.DiscardHandler), Instance: instance})
		if err != nil {
			continue
		}
		if p, ok := d.(interface {
			SweepEnded(context.Context) (bool, error)
		}); ok {
			pods = append(pods, p)
		} else if s, ok := d.(interface{ Sweep(context.Context) error }); ok {
			sweepers = append(sweepers, s)
		}
	}
	daemon := lockName("serve", instance)
	for {
		time.Sleep(janitorInterval)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		for _, s := range sweepers {
			_ = s.Sweep(sctx)
		}
		running := false
		for _, p := range pods {
			r, err := p.SweepEnded(sctx)
			running = running || r && err == nil
		}
		cancel()
		if running || hostlock.Held(runtimeDir, daemon) || holdersRun() {
			continue
		}
		// Nothing left to wait for: let go, and go on after all if the
		// daemon started again meanwhile and found this janitor still
		// there.
		lock.Drop()
		if !hostlock.Held(runtimeDir, daemon) {
			return nil
		}
		if lock, err = hostlock.Take(runtimeDir, name); err != nil {
			return nil
		}
	}
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

// startJanitor marks the daemon of instance as running (its serve lock,
// held until it exits) and starts its janitor for drivers unless one runs.
// The janitor outlives the daemon: kill -9 of the daemon leaves it
// sweeping after the sandboxes that end by themselves.
func startJanitor(log *slog.Logger, instance string, drivers map[string]sandbox.Driver) {
	var names []string
	for _, n := range janitorDrivers {
		if drivers[n] != nil {
			names = append(names, n)
		}
	}
	if len(names) == 0 || os.Geteuid() != 0 {
		return
	}
	l, err := hostlock.Take(runtimeDir, lockName("serve", instance))
	if err != nil {
		log.Warn("start the janitor", "err", err)
		return
	}
	heldServe = l
	if hostlock.Held(runtimeDir, lockName("janitor", instance)) {
		return
	}
	self, err := os.Executable()
	if err != nil {
		log.Warn("start the janitor", "err", err)
		return
	}
	cmd := exec.Command(self, append([]string{"janitor", "--instance", instance}, names...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		log.Warn("start the janitor", "err", fmt.Errorf("%s janitor: %w", self, err))
		return
	}
	go func() { _ = cmd.Wait() }()
}

// heldServe is the daemon's serve lock, held for its life.
var heldServe *hostlock.Lock //nolint:unused // held, never read: holding the lock is the point
