package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

func newSandboxAttachCmd() *cobra.Command {
	var fromNow bool
	cmd := &cobra.Command{
		Use:   "attach [--from-now] ID PID",
		Short: "Follow a running process of a sandbox; join its terminal if it has one",
		Long: `Follow a process of a sandbox (an exec or a background process, by the id
"sandbox exec", "processes" or a lost session named): print its output from
the oldest the daemon keeps (--from-now: only what comes next) as it comes,
and exit with its exit code once it ends. Any number of callers may follow
one process.

A process on a terminal is joined as "sandbox exec -t" does: your terminal
goes into raw mode, what you type goes to it, resizes follow, and it is
restored at the end. Ctrl-\\ detaches: the process runs on.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			return attach(cmd.Context(), c, args[0], args[1], client.Offsets{Now: fromNow}, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&fromNow, "from-now", false, "only the output that comes after attaching")
	return cmd
}

// attach follows process pid of sandbox id; on a terminal it is an
// interactive session whose Ctrl-\ detaches.
func attach(ctx context.Context, c *client.Client, id, pid string, from client.Offsets, stdin io.Reader, stdout, stderr io.Writer) error {
	s, ctx := cli.NewSession(ctx, stdin, stdout)
	defer s.End()
	var res *client.Result
	var serr error
	for ev, err := range c.FollowProcess(ctx, id, pid, from) {
		if err != nil {
			serr = err
			break
		}
		switch ev.Type {
		case "start":
			if ev.PTY == nil {
				continue // pipes: output only
			}
			send := func(b []byte) error { return c.WriteStdin(ctx, id, pid, b, false) }
			resize := func(sz tty.Size) error {
				return c.Resize(ctx, id, pid, client.TermSize{Rows: sz.Rows, Cols: sz.Cols})
			}
			if err := s.Begin(ctx, send, resize); err != nil {
				serr = err
				s.Cancel()
				continue
			}
			// The program learns the caller's size (and a full-screen
			// one redraws).
			_ = resize(s.Size())
		case "stderr":
			_, _ = stderr.Write(ev.Data)
		case "stdout", "pty":
			_, _ = stdout.Write(ev.Data)
		case "result":
			res = ev.Result
		}
		if ev.Missed > 0 && ev.Type != "pty" {
			fmt.Fprintf(stderr, "airlock: %d bytes of %s before this were no longer kept\n", ev.Missed, ev.Type)
		}
	}
	s.End()
	switch {
	case s.HasLeft():
		fmt.Fprintf(stderr, "airlock: detached; process %s runs on (airlock sandbox attach %s %s)\n", pid, id, pid)
		return nil
	case errors.Is(serr, client.ErrStreamBroken):
		return fmt.Errorf("lost the connection to the daemon: %w; process %s runs on: attach again with airlock sandbox attach %s %s", serr, pid, id, pid)
	case serr != nil:
		return serr
	case res == nil:
		return errors.New("attach: the stream ended without a result")
	}
	return exitWithResult(res, stderr)
}
