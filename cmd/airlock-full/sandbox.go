package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
	"github.com/airlock-sandbox/airlock/internal/symlink"
	"github.com/airlock-sandbox/airlock/internal/tartree"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

func init() { cli.RegisterCommand(newSandboxCmd) }

func newSandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Use long-lived sandboxes of a daemon (AIRLOCK_URL, AIRLOCK_API_KEY)",
	}
	cmd.AddCommand(newSandboxCreateCmd(), newSandboxExecCmd(), newSandboxAttachCmd(), newSandboxCpCmd(), newSandboxLsCmd(), newSandboxRmCmd(),
		newSandboxSnapshotCmd(), newSandboxRestoreCmd(), newSandboxDiffCmd(), newSandboxForkCmd(), newSandboxExportCmd(), newSandboxChangesCmd(),
		newSandboxPauseCmd(), newSandboxResumeCmd())
	return cmd
}

func newSandboxCreateCmd() *cobra.Command {
	var template, memory string
	var cpus float64
	var pids int
	var ttl, idle time.Duration
	var env []string
	var checkpoints int
	var mounts []string
	var onTimeout string
	var autoResume bool
	cmd := &cobra.Command{
		Use:   "create [--template T] [--memory SIZE] [--ttl D] [-e K=V] [--checkpoints N] [--mount HOST:PATH[:ro|:rw|:cow]] [--on-timeout pause [--auto-resume]]",
		Short: "Make a sandbox and print its id (alone, on stdout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			req := client.CreateRequest{Template: template, TTL: ttl, IdleTimeout: idle, Limits: client.Limits{CPUs: cpus, Pids: pids}, Checkpoints: checkpoints,
				OnTimeout: onTimeout, AutoResume: autoResume}
			if memory != "" {
				if req.Limits.MemoryBytes, err = supervisor.ParseSize(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if req.Env, err = envMap(env); err != nil {
				return err
			}
			for _, s := range mounts {
				m, err := cli.ParseMount(s)
				if err != nil {
					return err
				}
				req.Mounts = append(req.Mounts, client.Mount{Source: m.Source, Target: m.Target, Writable: m.Writable, Cow: m.Cow})
			}
			sb, err := c.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), sb.ID)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&template, "template", "", "template of the daemon's config (default: \"default\")")
	fl.StringVar(&memory, "memory", "", "memory limit, at most the template's")
	fl.Float64Var(&cpus, "cpus", 0, "CPU quota in cores, at most the template's")
	fl.IntVar(&pids, "pids", 0, "process limit, at most the template's")
	fl.DurationVar(&ttl, "ttl", 0, "lifetime (default: the template's)")
	fl.DurationVar(&idle, "idle-timeout", 0, "destroy the sandbox after this long unused")
	fl.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE added to every command's environment (repeatable)")
	fl.IntVar(&checkpoints, "checkpoints", 0, "snapshot /workspace before each of the last N commands (diff --step, restore --undo)")
	fl.StringArrayVar(&mounts, "mount", nil, "a host path the daemon's policy allows: HOST:PATH[:ro|:rw|:cow]; cow: review the changes with `airlock sandbox changes` (repeatable)")
	fl.StringVar(&onTimeout, "on-timeout", "", "what its TTL does: kill (the default) or pause (a driver that can pause)")
	fl.BoolVar(&autoResume, "auto-resume", false, "with --on-timeout pause: a command, a file or a snapshot resumes it when paused")
	return cmd
}

func envMap(env []string) (map[string]string, error) {
	if len(env) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: write KEY=VALUE", e)
		}
		m[k] = v
	}
	return m, nil
}

func newSandboxExecCmd() *cobra.Command {
	var env []string
	var workdir string
	var timeout time.Duration
	var stdin, term bool
	var rollback string
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, stream its output, exit with its code",
		Long: `Run a command in a sandbox, stream its output as it comes, and exit with
the command's exit code (128+N when a signal N ended it, 125 when airlock
failed).

With -t the command runs on a terminal of the sandbox's own, sized as
yours: your terminal goes into raw mode, so every key reaches the command
(Ctrl-C interrupts it, not airlock), and window resizes follow. Ctrl-\
leaves the session and kills the command. Your terminal is restored when
the session ends, however it ends. A command on a terminal has no time
limit unless --timeout gives one; it ends with its sandbox.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			req := client.ExecRequest{Argv: args[1:], Cwd: workdir, Timeout: timeout, Rollback: rollback}
			if req.Env, err = envMap(env); err != nil {
				return err
			}
			if term {
				if stdin {
					return errors.New("-t sends your input as you type it: leave out -i")
				}
				return execTerminal(cmd.Context(), c, args[0], req, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if stdin {
				if req.Stdin, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4<<20)); err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			res, err := c.ExecStream(cmd.Context(), args[0], req, func(ev client.Event) error {
				w := out
				if ev.Type == "stderr" {
					w = errw
				}
				_, err := w.Write(ev.Data)
				return err
			})
			if err != nil {
				return err
			}
			return exitWithResult(res, errw)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE in the command's environment (repeatable)")
	fl.StringVarP(&workdir, "workdir", "w", "", "working directory inside the sandbox")
	fl.DurationVar(&timeout, "timeout", 0, "wall-time limit (default: the sandbox's; none with -t)")
	fl.BoolVarP(&stdin, "interactive", "i", false, "send this command's standard input (up to 4 MiB) to the command")
	fl.BoolVarP(&term, "tty", "t", false, "run the command on a terminal, and type into it from yours (Ctrl-\\ leaves)")
	fl.StringVar(&rollback, "rollback", "", "on_failure: put /workspace back as it was when the command fails")
	return cmd
}

// exitWithResult says why res ended when it did not simply exit, and
// exits with its code (128+N for a signal N).
func exitWithResult(res *client.Result, errw io.Writer) error {
	code := res.ExitCode
	if res.Signal != "" {
		code = 128 + 9
		if n, ok := sandbox.SignalNumber(res.Signal); ok {
			code = 128 + int(n)
		}
	}
	if res.Reason != "exit" || res.Signal != "" {
		msg := res.Message
		if msg == "" {
			msg = res.Reason
		}
		fmt.Fprintf(errw, "airlock: %s\n", termsafe.Text(msg))
	}
	if l := rollbackLine(res.Rollback); l != "" {
		fmt.Fprintf(errw, "airlock: %s\n", termsafe.Text(l))
	}
	return cli.ExitWith(code)
}

// execTerminal runs req on a terminal in sandbox id, as an interactive
// session on the caller's terminal.
func execTerminal(ctx context.Context, c *client.Client, id string, req client.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) error {
	s, ctx := cli.NewSession(ctx, stdin, stdout)
	defer s.End()
	sz := s.Size()
	req.PTY = &client.TermSize{Rows: sz.Rows, Cols: sz.Cols}
	req.Env = cli.TTYEnv(req.Env)
	var res *client.Result
	var serr error
	started := false
	var pid string
	for ev, err := range c.ExecEvents(ctx, id, req) {
		if err != nil {
			serr = err
			break
		}
		switch ev.Type {
		case "start":
			started = true
			pid = ev.ID
			send := func(b []byte) error { return c.WriteStdin(ctx, id, pid, b, false) }
			resize := func(sz tty.Size) error {
				return c.Resize(ctx, id, pid, client.TermSize{Rows: sz.Rows, Cols: sz.Cols})
			}
			if err := s.Begin(ctx, send, resize); err != nil {
				serr = err
				s.Cancel() // which kills the command
			}
		case "pty":
			_, _ = stdout.Write(ev.Data)
		case "result":
			res = ev.Result
		}
	}
	s.End()
	switch {
	case s.HasLeft() && started:
		// Stopping the stream killed the command.
		fmt.Fprintln(stderr, cli.LeftMessage("the command was killed"))
		return cli.ExitWith(128 + 9)
	case s.HasLeft():
		fmt.Fprintln(stderr, cli.LeftMessage("the command did not start"))
		return cli.ExitWith(cli.ExitAirlock)
	case errors.Is(serr, client.ErrStreamBroken) && pid != "":
		return fmt.Errorf("lost the connection to the daemon: %w; if the daemon still runs, join it again with airlock sandbox attach %s %s", serr, id, pid)
	case serr != nil:
		return serr
	case res == nil:
		return errors.New("exec: the stream ended without a result")
	}
	return exitWithResult(res, stderr)
}

// remoteRef splits "ID:PATH"; ok is false for a local path.
func remoteRef(s string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || p == "" {
		return "", "", false
	}
	return id, p, true
}

func newSandboxCpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the host and a sandbox (ID:PATH names the sandbox side)",
		Long: `Copy a file or a directory tree between the host and a sandbox. One of SRC
and DST is ID:PATH. A directory travels as a tar archive, checked entry by
entry on arrival; a local DST of "-" writes the file (or the tar of a
directory) to stdout.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sid, sp, sRemote := remoteRef(args[0])
			did, dp, dRemote := remoteRef(args[1])
			switch {
			case sRemote == dRemote:
				return errors.New("cp: exactly one of SRC and DST must be ID:PATH")
			case dRemote: // upload
				fi, err := os.Stat(args[0])
				if err != nil {
					return err
				}
				if !fi.IsDir() {
					f, err := os.Open(args[0])
					if err != nil {
						return err
					}
					defer f.Close()
					return c.WriteFile(ctx, did, dp, f, fi.Mode().Perm())
				}
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(tartree.Write(args[0], pw)) }()
				_, err = c.UploadArchive(ctx, did, dp, pr)
				return err
			default: // download
				fi, err := c.Stat(ctx, sid, sp)
				if err != nil {
					return err
				}
				if fi.Type != "dir" {
					if args[1] == "-" {
						return c.ReadFileTo(ctx, sid, sp, cmd.OutOrStdout())
					}
					dst := args[1]
					if st, err := os.Stat(dst); err == nil && st.IsDir() {
						dst = filepath.Join(dst, fi.Name)
					}
					f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode.Perm()|0o600)
					if err != nil {
						return err
					}
					if err := c.ReadFileTo(ctx, sid, sp, f); err != nil {
						f.Close()
						return err
					}
					return f.Close()
				}
				if args[1] == "-" {
					return c.DownloadArchive(ctx, sid, sp, cmd.OutOrStdout())
				}
				var buf bytes.Buffer
				if err := c.DownloadArchive(ctx, sid, sp, &buf); err != nil {
					return err
				}
				return untar(&buf, args[1])
			}
		},
	}
	return cmd
}

// untar extracts a tar archive that came out of a sandbox into dir, with
// the same checks the daemon applies to uploads, inside an os.Root. The
// archive's symlinks are made last, once each target is known to stay in
// dir in the tree as it will be: the archive's links and those already in
// dir substituted (symlink.Resolve), whatever order the archive lists
// them in.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	chk := api.NewArchiveChecker(api.ArchiveLimits{})
	tr := tar.NewReader(r)
	links := map[string]string{}
	var order []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the archive: %w", err)
		}
		e, err := chk.Check(h)
		if err != nil {
			return err
		}
		switch e.Kind {
		case api.EntryDir:
			if err := root.MkdirAll(e.Name, e.Mode|0o700); err != nil {
				return err
			}
		case api.EntryFile:
			if err := root.MkdirAll(filepath.Dir(e.Name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(e.Name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, e.Mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, e.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case api.EntrySymlink:
			links[e.Name] = e.Target
			order = append(order, e.Name)
		}
	}
	look := func(rel string) (string, bool, error) {
		if t, ok := links[rel]; ok {
			return t, true, nil
		}
		fi, err := root.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", false, nil
		}
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return "", false, err
		}
		t, err := root.Readlink(rel)
		return t, err == nil, err
	}
	for _, name := range order {
		if _, _, err := symlink.Resolve(name, links[name], look); err != nil {
			return fmt.Errorf("archive entry %q: %w; nothing of the archive's symlinks was made", name, err)
		}
	}
	for _, name := range order {
		if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		if err := root.Symlink(links[name], name); err != nil {
			return err
		}
	}
	return nil
}

func newSandboxLsCmd() *cobra.Command {
	var state, template string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--state S] [--template T] [--json]",
		Short: "List your sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			sbs, err := c.ListSandboxes(cmd.Context(), client.ListOptions{State: state, Template: template})
			if err != nil {
				return err
			}
			if asJSON {
				if sbs == nil {
					sbs = []client.Sandbox{}
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sbs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTEMPLATE\tPROTOCOL\tCREATED\tEXPIRES\tEND REASON")
			var mismatched []client.Sandbox
			for _, s := range sbs {
				exp := ""
				switch {
				case !s.ExpiresAt.IsZero() && s.State == client.StateRunning:
					exp = time.Until(s.ExpiresAt).Round(time.Second).String()
				case s.Paused != nil:
					// Paused: its paused TTL runs, its TTL waits.
					exp = "paused " + time.Until(s.Paused.ExpiresAt).Round(time.Second).String()
				}
				// The agent protocol each sandbox runs: after an upgrade,
				// sandboxes of another version run on but only end.
				proto := "-"
				if s.AgentProtocol > 0 {
					proto = strconv.Itoa(s.AgentProtocol)
				}
				if s.Mismatch != "" {
					proto += " (mismatch)"
					mismatched = append(mismatched, s)
				}
				// Every field the daemon sends is shown as a name: no tab or
				// control character of one moves the columns or the cursor.
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Name(s.ID), termsafe.Name(s.State), termsafe.Name(s.Template), proto, s.CreatedAt.Local().Format(time.DateTime), exp, termsafe.Name(s.EndReason))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, s := range mismatched {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", termsafe.Name(s.ID), termsafe.Text(s.Mismatch))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only sandboxes in this state: running, paused, destroyed, lost, …")
	fl.StringVar(&template, "template", "", "only sandboxes of this template")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client.FromEnv()
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.DeleteSandbox(cmd.Context(), id); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
				}
			}
			return errors.Join(errs...)
		},
	}
}
