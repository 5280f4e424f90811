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
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

func newSandboxChangesCmd() *cobra.Command {
	var target, reviewed string
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
what a reviewer should look at (warnings: a world-writable entry), then
the unified diffs of text files (capped).

--apply writes the changes at PATHs (relative to the mount or absolute in
the sandbox; a directory stands for all below it; none: every change) to
the host, each file atomically. When the host changed under one of them
since the sandbox started, nothing is applied and the conflicts are
listed (exit code 3). The apply sends each chosen change's entry as
listed (type, mode, size, content, symlink target): with --reviewed FILE,
as saved by 'changes ID --json > FILE' when it was reviewed; else as
listed when --apply starts. A change made since is a conflict.
--discard drops them from the sandbox's layer.
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
				if req.Expect, err = reviewedExpect(cmd.Context(), c, id, &req, reviewed); err != nil {
					return err
				}
				res, err := c.ApplyChanges(cmd.Context(), id, req)
				var ae *client.Error
				if errors.As(err, &ae) && ae.Code == "conflict" {
					fmt.Fprintln(cmd.ErrOrStderr(), "nothing was applied: these changed since they were reviewed (in the sandbox) or since the sandbox started (on the host):")
					for _, f := range ae.Conflicts {
						fmt.Fprintf(cmd.ErrOrStderr(), "  %s: %s\n", showPath(f.Path), termsafe.Text(f.Reason))
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
					line := fmt.Sprintf("applied  %-8s %s", termsafe.Name(a.Kind), showPath(a.Path))
					if a.Digest != "" {
						line += " " + termsafe.Name(a.Digest)
					}
					if a.Note != "" {
						line += " (" + termsafe.Text(a.Note) + ")"
					}
					fmt.Fprintln(out, line)
				}
				for _, r := range res.Refused {
					fmt.Fprintf(out, "refused  %s: %s\n", showPath(r.Path), termsafe.Text(r.Reason))
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
					fmt.Fprintf(out, "refused   %s: %s\n", showPath(r.Path), termsafe.Text(r.Reason))
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
	fl.StringVar(&reviewed, "reviewed", "", "with --apply: apply only what FILE (the --json listing that was reviewed) shows")
	fl.BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return cmd
}

// changesText renders a mount's pending change for people, as `sandbox
// diff` does, with what an apply refuses and the conflicts.
func changesText(m client.CowMount) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cow mount %s (host %s)", showPath(m.Target), showPath(m.Source))
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
		d.Add(sc)
	}
	d.Truncated = m.Truncated
	b.WriteString(d.Text())
	for _, c := range m.Changes {
		if c.Refused != "" {
			fmt.Fprintf(&b, "refused  %s: %s\n", showPath(c.Path), termsafe.Text(c.Refused))
		}
		if c.Conflict != "" {
			fmt.Fprintf(&b, "conflict %s: %s\n", showPath(c.Path), termsafe.Text(c.Conflict))
		}
		if c.Warning != "" {
			fmt.Fprintf(&b, "warning  %s: %s\n", showPath(c.Path), termsafe.Text(c.Warning))
		}
	}
	return b.String()
}

// showPath shows a path from a sandbox with every character a terminal
// would not show as itself marked (termsafe.Name).
func showPath(p string) string { return termsafe.Name(p) }
