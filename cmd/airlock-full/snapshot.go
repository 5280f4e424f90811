package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// The snapshot verbs of `airlock sandbox`: snapshot (and its ls, rm),
// restore, diff, fork.

func newSandboxSnapshotCmd() *cobra.Command {
	var name, label string
	var tmp, asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshot [--name N] [--label L] [--tmp] ID",
		Short: "Snapshot a sandbox's /workspace (and /tmp) and print the snapshot's id",
		Long: `Snapshot a sandbox's files: /workspace, and /tmp with --tmp. Files,
directories, symlinks and modes are kept; running processes are not part
of a snapshot. Content is stored once per key, so a snapshot after a few
changes costs only the changed files. Restore it (airlock sandbox restore),
compare it (airlock sandbox diff) or make a new sandbox from it (airlock
sandbox fork). "snapshot ls [ID]" lists snapshots, "snapshot rm SNAP"
deletes one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			s, err := c.Snapshot(cmd.Context(), args[0], client.SnapshotRequest{Name: name, Label: label, IncludeTmp: tmp})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONTo(cmd.OutOrStdout(), s)
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.ID)
			if s.Busy || len(s.Unsettled) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %s\n", termsafe.Text(s.Note))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&name, "name", "", "name, unique among the sandbox's snapshots (letters, digits, . _ -)")
	fl.StringVar(&label, "label", "", "free text kept with it")
	fl.BoolVar(&tmp, "tmp", false, "snapshot /tmp too")
	fl.BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	cmd.AddCommand(newSnapshotLsCmd(), newSnapshotRmCmd())
	return cmd
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newSnapshotLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [ID]",
		Short: "List a sandbox's snapshots (without ID: all of this key's)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			list, err := c.ListSnapshots(cmd.Context(), id)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONTo(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tKIND\tFILES\tBYTES\tCREATED\tLABEL")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", termsafe.Name(s.ID), dash(termsafe.Name(s.Name)), termsafe.Name(s.Sandbox), termsafe.Name(s.Kind), s.Files, s.Bytes, s.Created.Local().Format(time.DateTime), termsafe.Name(s.Label))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSnapshotRmCmd() *cobra.Command {
	var sb string
	cmd := &cobra.Command{
		Use:   "rm [--sandbox ID] SNAP...",
		Short: "Delete snapshots (ids, or names of --sandbox's)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range args {
				if err := c.DeleteSnapshot(cmd.Context(), sb, ref); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ref, err))
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVar(&sb, "sandbox", "", "the sandbox whose snapshot names are given")
	return cmd
}

func newSandboxRestoreCmd() *cobra.Command {
	var undo int
	cmd := &cobra.Command{
		Use:   "restore ID SNAP | restore --undo N ID",
		Short: "Make a sandbox's files exactly a snapshot's (or undo its last N commands)",
		Long: `Make the sandbox's /workspace (and /tmp, if the snapshot has it) exactly
the snapshot: files added since are removed, changed ones reverted, modes
and symlinks put back. It happens all or nothing. Running processes go on
running. SNAP is a snapshot id or a name of the sandbox's snapshots. With
--undo N (a sandbox created with --checkpoints), the files go back to
their state before the last N commands.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			req := client.RestoreRequest{UndoSteps: undo}
			switch {
			case len(args) == 2 && undo == 0:
				req.Snapshot = args[1]
			case len(args) == 1 && undo > 0:
			default:
				return errors.New("give the sandbox and a snapshot, or the sandbox and --undo N")
			}
			r, err := c.Restore(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s: %d added, %d changed, %d removed\n", r.Snapshot.ID, r.Added, r.Changed, r.Removed)
			return nil
		},
	}
	cmd.Flags().IntVar(&undo, "undo", 0, "undo the last N commands (needs checkpoints)")
	return cmd
}

func newSandboxDiffCmd() *cobra.Command {
	var step int64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff ID [SNAP [SNAP]]",
		Short: "Show what changed in a sandbox's files",
		Long: `Show what changed: without SNAP, since the sandbox's latest snapshot;
with one, since that snapshot; with two, from the first to the second
("now" names the files as they are). --step N shows what command N
changed (a sandbox created with --checkpoints). Each change is a line
(added, deleted, modified, mode, symlink, type), then the unified diffs of
text files (capped); binary files are marked.`,
		Args: cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			o := client.DiffOptions{Step: step}
			if len(args) > 1 {
				o.From = args[1]
			}
			if len(args) > 2 {
				o.To = args[2]
			}
			if asJSON {
				d, err := c.Diff(cmd.Context(), args[0], o)
				if err != nil {
					return err
				}
				return writeJSONTo(cmd.OutOrStdout(), d)
			}
			txt, err := c.DiffText(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			// The daemon renders the text safe; an older one did not.
			_, err = io.WriteString(cmd.OutOrStdout(), termsafe.Text(txt))
			return err
		},
	}
	cmd.Flags().Int64Var(&step, "step", 0, "what command N changed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the diff as JSON")
	return cmd
}

func newSandboxForkCmd() *cobra.Command {
	var ttl time.Duration
	var env []string
	var live liveForkFlags
	cmd := &cobra.Command{
		Use:   "fork SNAP | fork ID NAME | fork --live ID [NAME]",
		Short: "Make a new sandbox from a snapshot, or running copies of a running sandbox (--live), and print their ids",
		Long: `Make a new sandbox from a snapshot: the same template, its own identity,
the snapshot's files. Name the snapshot by its id, or by the sandbox and
the snapshot's name.

With --live, copy running sandbox ID, its processes and memory, into
--count new running sandboxes (labelled name=NAME when given), each with
its own id, host name, machine id and entropy; ID runs on. Drivers
without live_fork (airlock drivers) refuse it with their reason.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if live.on {
				return runLiveFork(cmd, args, live, ttl, env)
			}
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			req := client.ForkRequest{TTL: ttl}
			ref := args[0]
			if len(args) == 2 {
				req.Sandbox, ref = args[0], args[1]
			}
			if req.Env, err = envMap(env); err != nil {
				return err
			}
			r, err := c.Fork(cmd.Context(), ref, req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Sandbox.ID)
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime (default: the template's)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE added to every command's environment (repeatable)")
	live.add(cmd)
	return cmd
}

// rollbackLine says what a transactional command's rollback did.
func rollbackLine(rb *client.Rollback) string {
	switch {
	case rb == nil:
		return ""
	case rb.Error != "":
		return "rollback failed: " + rb.Error
	case rb.RolledBack:
		return fmt.Sprintf("rolled back (%s): undid %d added, %d changed, %d removed", rb.Why, rb.Added, rb.Changed, rb.Removed)
	}
	return ""
}
