package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

type mcpFlags struct {
	stateDir, config, policy string
}

func init() { cli.RegisterCommand(newMCPCmd) }

func newMCPCmd() *cobra.Command {
	var f mcpFlags
	cmd := &cobra.Command{
		Use:   "mcp [--state-dir DIR] [--config FILE]",
		Short: "Serve the Model Context Protocol on stdin/stdout: sandbox tools for agents",
		Long: `Serve MCP (stdio transport): tools to run code and commands and to read and
edit files in sandboxes (run_code, run_command, read_file, edit_file, …).

With AIRLOCK_URL and AIRLOCK_API_KEY set, the tools go to that daemon.
Otherwise airlock runs its own one-user supervisor on the native driver,
with its registry in STATE-DIR (default $XDG_STATE_HOME/airlock/mcp, or
/var/lib/airlock/mcp as root); every sandbox ends when airlock mcp does.

Each MCP session gets its own sandbox on first use, destroyed when the
session ends. Logs go to stderr; stdout carries only the protocol.

Add it to an MCP client as the command: airlock mcp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serveMCP(cmd.Context(), f, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.stateDir, "state-dir", "", "registry directory of the embedded supervisor (default $XDG_STATE_HOME/airlock/mcp, or /var/lib/airlock/mcp as root)")
	fl.StringVar(&f.config, "config", "", "TOML configuration of the embedded supervisor (templates; see docs/daemon.md)")
	fl.StringVar(&f.policy, "policy", "", "policy file of the embedded supervisor (TOML, see examples/policies); without one the safe defaults apply. An ask is put to the MCP client when it supports elicitation, and denied otherwise")
	return cmd
}

// mcpStateDir is the embedded supervisor's default state directory.
func mcpStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock", "mcp")
	}
	if os.Geteuid() == 0 {
		return filepath.Join(defaultStateDir, "mcp")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "airlock", "mcp")
	}
	return filepath.Join(os.TempDir(), "airlock-mcp")
}

// mcpConfig is the embedded supervisor's configuration unless --config
// gives one: sandboxes that live as long as an agent's session is likely to.
func mcpConfig() supervisor.Config {
	return supervisor.Config{Templates: []supervisor.Template{{
		Name:        supervisor.DefaultTemplate,
		TTL:         supervisor.Duration(8 * time.Hour),
		MaxTTL:      supervisor.Duration(24 * time.Hour),
		IdleTimeout: supervisor.Duration(time.Hour),
	}}}
}

func serveMCP(ctx context.Context, f mcpFlags, stdin io.Reader, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var backend mcp.Backend
	if os.Getenv(client.EnvURL) != "" || os.Getenv(client.EnvKey) != "" {
		if f.policy != "" {
			return fmt.Errorf("--policy is the embedded supervisor's; with %s set the daemon's own policy applies: leave --policy out, or unset %s and %s", client.EnvURL, client.EnvURL, client.EnvKey)
		}
		c, err := client.FromEnv()
		if err != nil {
			return err
		}
		backend = &mcp.Remote{C: c}
	} else {
		sup, done, err := embeddedSupervisor(ctx, f, log)
		if err != nil {
			return err
		}
		defer done()
		backend = &mcp.Local{Sup: sup, Caller: supervisor.Caller{KeyID: "mcp"}}
	}
	srv, err := mcp.New(mcp.Options{
		Backend:    func(context.Context, *sdk.CallToolRequest) (mcp.Backend, error) { return backend, nil },
		Logger:     log,
		SessionTTL: mcpSessionTTL,
	})
	if err != nil {
		return err
	}
	err = srv.ServeIO(ctx, io.NopCloser(stdin), nopWriteCloser{stdout})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// mcpSessionTTL is the lifetime asked for a session's sandbox (a daemon's
// template may allow less; then the template's is taken).
const mcpSessionTTL = 8 * time.Hour

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// embeddedSupervisor starts a supervisor of this process's own, and
// returns it with the func that destroys its sandboxes and closes it.
func embeddedSupervisor(ctx context.Context, f mcpFlags, log *slog.Logger) (*supervisor.Supervisor, func(), error) {
	cfg := mcpConfig()
	if f.config != "" {
		var err error
		if cfg, err = supervisor.LoadConfig(f.config); err != nil {
			return nil, nil, err
		}
	}
	dir := f.stateDir
	if dir == "" {
		dir = mcpStateDir()
	}
	var cleanups []func()
	done := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	st, err := store.Open(dir, 300*time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		// Another airlock mcp (another agent window) holds it: use a
		// directory of this process's own inside it.
		sub, merr := os.MkdirTemp(dir, "session-")
		if merr != nil {
			return nil, nil, fmt.Errorf("%w; and make a private state directory: %w", err, merr)
		}
		cleanups = append(cleanups, func() { _ = os.RemoveAll(sub) })
		st, err = store.Open(sub, 0)
		dir = sub
	}
	if err != nil {
		done()
		return nil, nil, err
	}
	cleanups = append(cleanups, func() { _ = st.Close() })
	pol := policy.Default()
	if f.policy != "" {
		if pol, err = policy.Load(f.policy); err != nil {
			done()
			return nil, nil, err
		}
	}
	// As in serve: the egress proxy runs in this process; secrets stay
	// here; the policy decides each request.
	var sup *supervisor.Supervisor
	popts := cfg.Egress.ProxyOptions(log)
	if err := cfg.Egress.Intercept(&popts, dir); err != nil {
		done()
		return nil, nil, err
	}
	popts.Policy = func(ctx context.Context, id, host string, port int) (bool, string, string) {
		return sup.EgressDecision(ctx, id, host, port)
	}
	popts.PolicyRequest = func(ctx context.Context, id, host string, port int, method, path string) (bool, string, string) {
		return sup.EgressRequestDecision(ctx, id, host, port, method, path)
	}
	drivers, err := cli.AvailableDrivers(ctx, cli.DriverOptions{Logger: log, Egress: egress.New(popts)})
	if err != nil {
		done()
		return nil, nil, err
	}
	snaps, objects, err := openObjects(ctx, cfg, dir)
	if err != nil {
		done()
		return nil, nil, err
	}
	sup, err = supervisor.New(supervisor.Options{Store: st, Drivers: drivers, Config: cfg, Logger: log, Policy: pol, NoApprover: true, Snapshots: snaps, Objects: objects, Images: &daemonImages{log: log}})
	if err != nil {
		done()
		return nil, nil, err
	}
	if _, err := sup.Recover(ctx); err != nil {
		done()
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	go sup.Run(runCtx)
	cleanups = append(cleanups, func() {
		stop()
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = sup.Close(cctx)
	})
	return sup, done, nil
}
