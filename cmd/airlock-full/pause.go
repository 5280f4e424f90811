package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// newSandboxPauseCmd is `airlock sandbox pause ID...`.
func newSandboxPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID...",
		Short: "Pause sandboxes: their processes and memory saved, resumed where they stopped (airlock sandbox resume)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(cmd, args, func(ctx context.Context, c *client.Client, id string) error {
				sb, err := c.PauseSandbox(ctx, id)
				if err != nil {
					return err
				}
				how := "memory saved"
				if sb.Paused != nil && sb.Paused.MemoryKeptInHost {
					how = "frozen, memory kept in the host"
				} else if sb.Paused != nil {
					how = fmt.Sprintf("%d MiB saved", (sb.Paused.StoredBytes+1<<20-1)>>20)
				}
				until := ""
				if sb.Paused != nil {
					until = ", until " + sb.Paused.ExpiresAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s paused (%s%s)\n", termsafe.Name(sb.ID), how, until)
				return nil
			})
		},
	}
}

// newSandboxResumeCmd is `airlock sandbox resume ID...`.
func newSandboxResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID...",
		Short: "Resume paused sandboxes where they stopped",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSandbox(cmd, args, func(ctx context.Context, c *client.Client, id string) error {
				sb, err := c.ResumeSandbox(ctx, id)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", termsafe.Name(sb.ID), termsafe.Name(sb.State))
				return nil
			})
		},
	}
}

// eachSandbox runs f on every id, and joins the errors, each named.
func eachSandbox(cmd *cobra.Command, ids []string, f func(ctx context.Context, c *client.Client, id string) error) error {
	c, err := client.FromEnv()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := f(cmd.Context(), c, id); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
