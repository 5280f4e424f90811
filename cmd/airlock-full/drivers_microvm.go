//go:build !no_microvm

package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/driver/microvm"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func init() {
	cli.RegisterDriver("microvm", func(o cli.DriverOptions) (sandbox.Driver, error) {
		d, err := microvm.New(microvm.Options{Logger: o.Logger, Egress: o.Egress})
		if err != nil {
			return nil, err // not a typed nil in an interface
		}
		return d, nil
	})
	cli.RegisterCommand(newMicroVMCmd)
}

func newMicroVMCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "microvm",
		Short: "Prepare what the microvm driver needs on this host",
	}
	var memory []string
	var cold bool
	prepare := &cobra.Command{
		Use:   "prepare [--memory SIZE]... [--cold]",
		Short: "Fetch the guest kernel and build the initramfs, root image and snapshots into the cache",
		Long: `Fetch the guest kernel (the package Debian's linux-image-cloud-amd64 depends on,
with apt-get download: it is unpacked into the cache, never installed as the
host's kernel), build the guest's initramfs and the default root image from
the host's packages, and boot and save the snapshot sandboxes start from, one
per --memory size (default: 128M, as the tests use, and the default limit).
Everything goes into $AIRLOCK_CACHE/microvm (default /var/cache/airlock) and is
reused while its inputs stay the same. Needs root, apt's package lists (apt-get
update) and QEMU (apt-get install qemu-system-x86).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var limits []sandbox.Limits
			for _, m := range memory {
				b, err := cli.ParseSize("--memory", m)
				if err != nil {
					return err
				}
				limits = append(limits, sandbox.Limits{MemoryBytes: b, CPUs: 1})
			}
			if len(limits) == 0 {
				limits = []sandbox.Limits{{MemoryBytes: 128 << 20, CPUs: 1}, {}}
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			d, err := microvm.New(microvm.Options{Logger: log, Cold: cold})
			if err != nil {
				return err
			}
			return d.Prepare(cmd.Context(), limits, func(format string, args ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), "microvm: "+format+"\n", args...)
			})
		},
	}
	prepare.Flags().StringArrayVar(&memory, "memory", nil, "make the snapshot of sandboxes with this memory limit, 1 CPU (repeatable)")
	prepare.Flags().BoolVar(&cold, "cold", false, "build the kernel, initramfs and root image only, no snapshot")
	cmd.AddCommand(prepare)
	return cmd
}
