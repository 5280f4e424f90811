package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
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
restored at the end. Ctrl-\\ detaches: the process runs on.

Otherwise (a process on pipes, or you are not on a terminal) what the
process printed is shown, not obeyed: a control, bidi or zero-width
character shows as ⟨U+XXXX⟩, a byte that is not UTF-8 as ⟨0xXX⟩. Output
redirected to a file or a pipe is the process's bytes as they are.`,
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
	// Until the caller joins the process's terminal, output that reaches
	// a terminal is rendered by termsafe.
	out, errOut := shownOn(stdout), shownOn(stderr)
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
			if s.Raw() {
				// Joined: a full-screen program draws on the caller's
				// terminal as on its own.
				out = stdout
			}
			// The program learns the caller's size (and a full-screen
			// one redraws).
			_ = resize(s.Size())
		case "stderr":
			_, _ = errOut.Write(ev.Data)
		case "stdout", "pty":
			_, _ = out.Write(ev.Data)
		case "result":
			res = ev.Result
		}
		if ev.Missed > 0 && ev.Type != "pty" {
			fmt.Fprintf(stderr, "airlock: %d bytes of %s before this were no longer kept\n", ev.Missed, ev.Type)
		}
	}
	flush(out)
	flush(errOut)
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

// shownOn returns w for output a sandbox controls: rendered by termsafe
// when w is a terminal (or not a file: in doubt, shown), w itself when it
// is a file or a pipe (a program reads the bytes).
func shownOn(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && !tty.IsTerminal(int(f.Fd())) {
		return w
	}
	return termsafe.NewWriter(w)
}

// flush writes what a termsafe.Writer kept of an incomplete character.
func flush(w io.Writer) {
	if tw, ok := w.(*termsafe.Writer); ok {
		_ = tw.Flush()
	}
}
