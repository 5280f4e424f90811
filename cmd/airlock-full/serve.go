package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/api/e2b"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// defaultStateDir holds the daemon's registry unless --state-dir says otherwise.
const defaultStateDir = "/var/lib/airlock"

type serveFlags struct {
	listen, stateDir, config, logFormat, policy, auditKey string
	checkConfig, shutdownSandboxes                        bool
}

func init() {
	cli.RegisterCommand(newServeCmd)
	cli.RegisterCommand(newKeysCmd)
	cli.RegisterCommand(newReapCmd)
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--listen ADDR] [--state-dir DIR] [--check-config]",
		Short: "Run the daemon: HTTP API, registry, reaper, warm pools",
		Long: `Run the airlock daemon. It serves the HTTP API under /v1 (OpenAPI document
at /v1/openapi.json), /healthz and /metrics, and keeps its registry in
STATE-DIR/airlock.db.

Its sandboxes outlive it: a stop (SIGTERM, SIGINT), an upgrade, a crash or a
kill -9 leaves them running, with their files, background processes and
running commands, and the next airlock serve on the same state directory
reattaches to them before it serves. One whose time to live passed
meanwhile is destroyed; one that died meanwhile is recorded as lost and its
leftovers removed. With --shutdown-sandboxes a stop destroys every sandbox
instead (as airlock reap does while no daemon runs).

Make a key first:  airlock keys create --state-dir DIR --role operator

The config file is TOML (the reference with every key and its default is
/etc/airlock/config.toml in the Debian package); the flags given here win
over it. --check-config reads it, names each wrong key with its line, and
exits without serving. Logs go to stderr (the journal, under systemd).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			changed := cmd.Flags().Changed
			if f.checkConfig {
				return checkConfig(f, changed, cmd.OutOrStdout())
			}
			return serve(cmd.Context(), f, changed, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", supervisor.DefaultListen, "address to listen on (config: listen)")
	fl.StringVar(&f.stateDir, "state-dir", defaultStateDir, "directory of the registry (config: state_dir)")
	fl.StringVar(&f.config, "config", "", "TOML configuration file (templates, pools, limits, egress, ...)")
	fl.StringVar(&f.logFormat, "log-format", supervisor.DefaultLogFormat, "log format on stderr: text or json (config: log_format)")
	fl.StringVar(&f.policy, "policy", "", "policy file (TOML, see examples/policies); without one the safe defaults apply (config: policy)")
	fl.StringVar(&f.auditKey, "audit-key", "", "the audit log's checkpoint signing key (default $XDG_CONFIG_HOME/airlock/audit.key, or /var/lib/airlock-keys/audit.key as root: never in the state directory, next to the log; config: audit_key)")
	fl.BoolVar(&f.checkConfig, "check-config", false, "check the --config file and the flags, print what is wrong (key and line) or ok, and exit")
	fl.BoolVar(&f.shutdownSandboxes, "shutdown-sandboxes", false, "on a stop (SIGTERM, SIGINT), destroy every sandbox instead of leaving them running for the next daemon")
	return cmd
}

func serve(ctx context.Context, f serveFlags, changed func(string) bool, stderr io.Writer) error {
	cfg, err := serveConfig(f, changed)
	if err != nil {
		return err
	}
	f.listen, f.stateDir, f.policy, f.auditKey = cfg.Listen, cfg.StateDir, cfg.Policy, cfg.AuditKey
	h := logHandler(cfg.LogFormat, stderr)
	log := slog.New(h)
	st, err := store.Open(f.stateDir, 0)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every action is decided by the policy and recorded in the audit log
	// (STATE/audit.log, signed with the key at --audit-key).
	pol, alog, err := openDaemonGuard(f.stateDir, f.auditKey, f.policy, log)
	if err != nil {
		return err
	}
	defer alog.Close()
	// The egress proxy runs in the daemon; secrets stay here.
	popts := cfg.Egress.ProxyOptions(log)
	// Hosts with secrets or method and path rules are intercepted with
	// the daemon's CA (STATE/egress-ca.key).
	if err := cfg.Egress.Intercept(&popts, f.stateDir); err != nil {
		return err
	}
	// The supervisor, made below, records each decision in the audit log
	// (with the sandbox's owner), and the policy decides each egress
	// request too.
	var sup *supervisor.Supervisor
	popts.Decided = func(d egress.Decision) { sup.RecordEgress(d) }
	popts.Policy = func(ctx context.Context, id, host string, port int) (bool, string, string) {
		return sup.EgressDecision(ctx, id, host, port)
	}
	popts.PolicyRequest = func(ctx context.Context, id, host string, port int, method, path string) (bool, string, string) {
		return sup.EgressRequestDecision(ctx, id, host, port, method, path)
	}
	drivers, err := cli.AvailableDrivers(ctx, cli.DriverOptions{Logger: log, Egress: egress.New(popts), Instance: cli.DaemonInstance(f.stateDir)})
	if err != nil {
		return err
	}
	if drivers, err = offerDrivers(cfg, drivers); err != nil {
		return err
	}
	// What sandboxes that end by themselves leave on the host goes with
	// the janitor, which outlives this daemon.
	startJanitor(log, cli.DaemonInstance(f.stateDir), drivers)
	images := &daemonImages{log: log}
	reg := prometheus.NewRegistry()
	reg.MustRegister(images.collectors()...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_audit_ok", Help: "1 while the audit log records actions; 0 once it has failed (every action is refused)."}, func() float64 {
			if alog.Err() != nil {
				return 0
			}
			return 1
		}))
	// Snapshots of sandboxes' files live in STATE/snapshots, or in the
	// object store's bucket the config names.
	snaps, objects, err := openObjects(ctx, cfg, f.stateDir)
	if err != nil {
		return err
	}
	sup, err = supervisor.New(supervisor.Options{
		Store: st, Drivers: drivers, Config: cfg,
		Logger: log, Metrics: supervisor.NewMetrics(reg), Policy: pol, Audit: alog, Snapshots: snaps, Objects: objects,
		Images: images,
	})
	if err != nil {
		return err
	}
	// Every sandbox of the daemon before is reattached (or ended) before
	// the API takes a request.
	if _, err := sup.Recover(ctx); err != nil {
		return err
	}
	// An apply of a cow mount's changes that a crash interrupted: which
	// paths it wrote.
	sup.RecoverCow(ctx)
	cfg = sup.Config()
	srv, err := api.New(api.Options{
		Supervisor: sup, Store: st, ListenAddr: f.listen, Gatherer: reg, Logger: log,
		AllowedHosts: cfg.AllowedHosts, AllowedOrigins: cfg.AllowedOrigins,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The E2B SDKs' API shares the listener (internal/api/e2b).
	var handler http.Handler = srv
	if !cfg.E2B.Disabled {
		// Exposed ports' names end in the domain, with the port of the
		// listener that serves them (internal/api/e2b/ports.go).
		portsAddr := ln.Addr().String()
		var pln net.Listener
		if cfg.E2B.PortsListen != "" {
			if pln, err = net.Listen("tcp", cfg.E2B.PortsListen); err != nil {
				return fmt.Errorf("listen for exposed ports (e2b.ports_listen): %w", err)
			}
			portsAddr = pln.Addr().String()
		}
		domain := e2b.DomainFor(cfg.E2B.Domain, portsAddr)
		eh, err := e2b.New(e2b.Options{Supervisor: sup, Store: st, API: srv, Config: cfg.E2B, Logger: log, Domain: domain})
		if err != nil {
			return err
		}
		defer eh.Close(context.Background())
		handler = eh
		if pln != nil {
			ps := &http.Server{Handler: eh.PortsHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(h, slog.LevelWarn), Protocols: e2b.ServerProtocols()}
			go func() { _ = ps.Serve(pln) }()
			defer ps.Close()
			log.Info("serving exposed ports", "addr", pln.Addr().String(), "domain", domain)
		}
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(h, slog.LevelWarn)}
	if !cfg.E2B.Disabled {
		hs.Protocols = e2b.ServerProtocols() // h2c too, for exposed ports
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	go sup.Run(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "state_dir", f.stateDir)
	select {
	case <-ctx.Done():
	case err := <-errc:
		_ = sup.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f.shutdownSandboxes {
		log.Info("shutting down: destroying every sandbox")
		// Sandboxes first: that ends the execs whose streams would hold
		// the server's shutdown.
		err = sup.Close(sctx)
		_ = hs.Shutdown(sctx)
		return err
	}
	log.Info("shutting down: the sandboxes run on for the next daemon")
	// The connections first, streams in flight too: a caller follows its
	// exec again by id from the next daemon. Then the sandboxes are let go
	// of, their commands running on.
	_ = hs.Close()
	return sup.Detach(sctx)
}

func newKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the daemon's API keys",
	}
	var stateDir, name, role, maxMem string
	var maxSandboxes int
	var labelFlags []string
	var e2bForm bool
	create := &cobra.Command{
		Use:   "create [--state-dir DIR | through AIRLOCK_URL] [--name N] [--role agent|operator] [--e2b]",
		Short: "Make an API key and print it (once: only its hash is kept)",
		Long: `Make an API key and print its secret on stdout; it is never shown again.

With --state-dir the key goes straight into the registry of a daemon that
is not running. While a daemon runs, go through it instead: set AIRLOCK_URL
and AIRLOCK_API_KEY (an operator key) and leave --state-dir out.

--e2b writes the secret as e2b_ and hex digits, the form the E2B SDKs
check for, so that it can be their E2B_API_KEY; it is an airlock key like
any other and works on airlock's own API too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := store.Quota{MaxSandboxes: maxSandboxes}
			if maxMem != "" {
				n, err := supervisor.ParseSize(maxMem)
				if err != nil {
					return fmt.Errorf("--max-memory: %w", err)
				}
				q.MaxMemoryBytes = n
			}
			r, err := store.ParseRole(role)
			if err != nil {
				return err
			}
			var labels map[string]string
			for _, l := range labelFlags {
				k, v, ok := strings.Cut(l, "=")
				if !ok {
					return fmt.Errorf("--label %q: write NAME=VALUE, e.g. trust=untrusted", l)
				}
				if labels == nil {
					labels = map[string]string{}
				}
				labels[k] = v
			}
			if err := store.CheckLabels(labels); err != nil {
				return err
			}
			format := store.FormatAirlock
			if e2bForm {
				format = store.FormatE2B
			}
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if stateDir == "" {
				c, err := client.FromEnv()
				if err != nil {
					return fmt.Errorf("give --state-dir DIR (daemon stopped) or set AIRLOCK_URL and an operator AIRLOCK_API_KEY (daemon running): %w", err)
				}
				k, err := c.CreateKey(cmd.Context(), client.CreateKeyRequest{Name: name, Role: string(r), Quota: client.Quota{MaxSandboxes: q.MaxSandboxes, MaxMemoryBytes: q.MaxMemoryBytes}, Labels: labels, Format: string(format)})
				if err != nil {
					return err
				}
				fmt.Fprintln(out, k.Secret)
				fmt.Fprintf(errw, "key %s (%s) created; the secret above is shown only once\n", k.ID, k.Role)
				return nil
			}
			st, err := openOffline(stateDir)
			if err != nil {
				return err
			}
			defer st.Close()
			k, secret, err := st.NewKeyFormat(nil, name, r, q, store.RateLimits{}, time.Now(), format)
			if err != nil {
				return err
			}
			if len(labels) > 0 {
				if err := st.SetKeyLabels(k.ID, labels); err != nil {
					return err
				}
			}
			fmt.Fprintln(out, string(secret))
			fmt.Fprintf(errw, "key %s (%s) created; the secret above is shown only once\n", k.ID, k.Role)
			return nil
		},
	}
	fl := create.Flags()
	fl.StringVar(&stateDir, "state-dir", "", "registry directory of a stopped daemon")
	fl.StringVar(&name, "name", "", "a name to recognise the key by")
	fl.StringVar(&role, "role", string(store.RoleAgent), "agent (its own sandboxes) or operator (also keys, every sandbox)")
	fl.StringArrayVar(&labelFlags, "label", nil, "a label the policy's rules and tiers read, NAME=VALUE (repeatable), e.g. trust=untrusted")
	fl.IntVar(&maxSandboxes, "max-sandboxes", 0, "live sandboxes the key may hold (0: 10)")
	fl.StringVar(&maxMem, "max-memory", "", "total memory limit of the key's live sandboxes (default 8G)")
	fl.BoolVar(&e2bForm, "e2b", false, "write the secret as e2b_ and hex digits, the form the E2B SDKs accept (E2B_API_KEY); it works on airlock's own API too")

	var lsDir string
	ls := &cobra.Command{
		Use:   "ls [--state-dir DIR | through AIRLOCK_URL]",
		Short: "List the API keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var keys []client.Key
			if lsDir == "" {
				c, err := client.FromEnv()
				if err != nil {
					return err
				}
				if keys, err = c.ListKeys(cmd.Context()); err != nil {
					return err
				}
			} else {
				st, err := openOffline(lsDir)
				if err != nil {
					return err
				}
				defer st.Close()
				ks, err := st.Keys()
				if err != nil {
					return err
				}
				for _, k := range ks {
					keys = append(keys, client.Key{ID: k.ID, Name: k.Name, Role: string(k.Role), CreatedAt: k.Created})
				}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tROLE\tNAME\tCREATED")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Role, k.Name, k.CreatedAt.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVar(&lsDir, "state-dir", "", "registry directory of a stopped daemon")
	cmd.AddCommand(create, ls)
	return cmd
}

// openOffline opens a registry for an offline command, failing at once
// with what to do when a daemon holds it.
func openOffline(dir string) (*store.Store, error) {
	st, err := store.Open(dir, 300*time.Millisecond)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("%w\na daemon is running on %s: go through it (set AIRLOCK_URL and AIRLOCK_API_KEY and leave --state-dir out), or stop it first", err, dir)
	}
	return st, err
}

func newReapCmd() *cobra.Command {
	var stateDir, auditKey string
	cmd := &cobra.Command{
		Use:   "reap --state-dir DIR",
		Short: "End every sandbox of a daemon that is not running, and remove their leftovers",
		Long: `End every sandbox the registry holds as live, while no daemon runs on the
state directory: the sandboxes of a daemon outlive it, and this is how to
end them all (those of any airlock version: one whose agent speaks another
protocol than this airlock's is ended too). Each is recorded as destroyed
(reason reaped), or as lost when it had died already; then the leftovers
of dead sandboxes (cgroups, sockets, locks) are removed. Fails at once if a
daemon is running on the state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openOffline(stateDir)
			if err != nil {
				return err
			}
			defer st.Close()
			// The daemon's audit log records each lost sandbox, as the
			// daemon's own recovery does.
			alog, err := openDaemonAudit(stateDir, auditKey, nil)
			if err != nil {
				return err
			}
			defer alog.Close()
			drivers, err := cli.AvailableDrivers(cmd.Context(), cli.DriverOptions{Instance: cli.DaemonInstance(stateDir)})
			if err != nil {
				return err
			}
			// The registry's templates may name drivers this host has:
			// every driver offered, no template needed.
			sup, err := supervisor.New(supervisor.Options{Store: st, Drivers: drivers, Audit: alog})
			if err != nil {
				return err
			}
			rep, err := sup.Reap(cmd.Context())
			if err != nil {
				return err
			}
			for _, id := range rep.Reattached {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\treaped\n", id)
			}
			for _, id := range rep.Expired {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\texpired\n", id)
			}
			for _, id := range rep.Lost {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\tlost\n", id)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d sandboxes ended, %d had expired, %d lost; leftovers of dead sandboxes removed (drivers: %v)\n",
				len(rep.Reattached), len(rep.Expired), len(rep.Lost), rep.Reaped)
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state-dir", defaultStateDir, "registry directory")
	cmd.Flags().StringVar(&auditKey, "audit-key", "", "the daemon's audit signing key (as for airlock serve)")
	return cmd
}
