package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/snapshot"
)

func newSandboxChangesCmd() *cobra.Command {
	var target string
	var apply, discard, asJSON bool
	cmd := &cobra.Command{
		Use:   "changes ID [--apply | --discard] [PATH...]",
		Short: "Review a sandbox's changes to its copy-on-write mounts; apply or discard them",
		Long: `A copy-on-write mount (--mount HOST:PATH:cow) shows the sandbox a host
directory and keeps what it writes in a layer of its own: nothing reaches
the host until it is applied.

Without --apply or --discard, list the pending changes: one line per path
(added, deleted, modified, mode, symlink, type), what an apply would refuse
and why, paths the host changed since the sandbox started (conflicts),
then the unified diffs of text files (capped).

--apply writes the changes at PATHs (relative to the mount or absolute in
the sandbox; a directory stands for all below it; none: every change) to
the host, each file atomically. When the host changed under one of them
since the sandbox started, nothing is applied and the conflicts are
listed (exit code 3). --discard drops them from the sandbox's layer.
--target names the mount when the sandbox has more than one.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			id, paths := args[0], args[1:]
			out := cmd.OutOrStdout()
			req := client.ChangesRequest{Target: target, Paths: paths}
			switch {
			case apply && discard:
				return errors.New("give --apply or --discard, not both")
			case apply:
				res, err := c.ApplyChanges(cmd.Context(), id, req)
				var ae *client.Error
				if errors.As(err, &ae) && ae.Code == "conflict" {
					fmt.Fprintln(cmd.ErrOrStderr(), "nothing was applied: the host changed since the sandbox started under:")
					for _, f := range ae.Conflicts {
						fmt.Fprintf(cmd.ErrOrStderr(), "  %s: %s\n", showPath(f.Path), f.Reason)
					}
					fmt.Fprintln(cmd.ErrOrStderr(), "discard those paths (airlock sandbox changes --discard ID PATH...), or apply the others by naming them")
					return &cli.ExitError{Code: 3}
				}
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONTo(out, res)
				}
				for _, a := range res.Applied {
					line := fmt.Sprintf("applied  %-8s %s", a.Kind, showPath(a.Path))
					if a.Digest != "" {
						line += " " + a.Digest
					}
					if a.Note != "" {
						line += " (" + a.Note + ")"
					}
					fmt.Fprintln(out, line)
				}
				for _, r := range res.Refused {
					fmt.Fprintf(out, "refused  %s: %s\n", showPath(r.Path), r.Reason)
				}
				fmt.Fprintf(out, "%d applied, %d refused\n", len(res.Applied), len(res.Refused))
				return nil
			case discard:
				res, err := c.DiscardChanges(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONTo(out, res)
				}
				for _, p := range res.Discarded {
					fmt.Fprintf(out, "discarded %s\n", showPath(p))
				}
				for _, r := range res.Refused {
					fmt.Fprintf(out, "refused   %s: %s\n", showPath(r.Path), r.Reason)
				}
				fmt.Fprintf(out, "%d discarded\n", len(res.Discarded))
				return nil
			}
			if len(paths) > 0 {
				return errors.New("paths are for --apply and --discard; the listing shows every change")
			}
			mounts, err := c.Changes(cmd.Context(), id)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONTo(out, map[string]any{"mounts": mounts})
			}
			if len(mounts) == 0 {
				fmt.Fprintf(out, "sandbox %s has no copy-on-write mount\n", id)
				return nil
			}
			for _, m := range mounts {
				if target != "" && m.Target != target {
					continue
				}
				_, err := io.WriteString(out, changesText(m))
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&target, "target", "", "the cow mount's path in the sandbox (needed when it has more than one)")
	fl.BoolVar(&apply, "apply", false, "write the changes at PATHs (default: all) to the host")
	fl.BoolVar(&discard, "discard", false, "drop the changes at PATHs (default: all)")
	fl.BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return cmd
}

// changesText renders a mount's pending change for people, as `sandbox
// diff` does, with what an apply refuses and the conflicts.
func changesText(m client.CowMount) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cow mount %s (host %s)", m.Target, m.Source)
	if m.Approval {
		b.WriteString(": an operator must apply or discard")
	}
	b.WriteString("\n")
	if len(m.Changes) == 0 {
		b.WriteString("no pending changes\n")
		return b.String()
	}
	d := snapshot.Diff{From: "host", To: "sandbox"}
	for _, c := range m.Changes {
		var sc snapshot.Change
		raw, _ := json.Marshal(c.Change)
		_ = json.Unmarshal(raw, &sc)
		d.Changes = append(d.Changes, sc)
		switch sc.Kind {
		case snapshot.ChangeAdded:
			d.Added++
		case snapshot.ChangeDeleted:
			d.Deleted++
		case snapshot.ChangeModified:
			d.Modified++
		default:
			d.Other++
		}
	}
	d.Truncated = m.Truncated
	b.WriteString(d.Text())
	for _, c := range m.Changes {
		if c.Refused != "" {
			fmt.Fprintf(&b, "refused  %s: %s\n", showPath(c.Path), c.Refused)
		}
		if c.Conflict != "" {
			fmt.Fprintf(&b, "conflict %s: %s\n", showPath(c.Path), c.Conflict)
		}
	}
	return b.String()
}

// showPath shows a path with control characters escaped.
func showPath(p string) string {
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Sprintf("%q", p)
	}
	return p
}
