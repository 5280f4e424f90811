package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Exit codes of `airlock audit verify`: the log is not intact, or it is
// intact up to its last checkpoint but lines after it are not sealed.
const (
	exitAuditBroken   = 1
	exitAuditUnsealed = 2
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check and read an audit log",
	}
	cmd.AddCommand(newAuditVerifyCmd(), newAuditTailCmd())
	return cmd
}

func newAuditVerifyCmd() *cobra.Command {
	var keyPath, headPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Prove an audit log intact, or say at which line it is not",
		Long: `Check an audit log's hash chain, sequence numbers and signed checkpoints.
Each edited, removed or reordered line, a torn final line and a log rewritten
without the daemon's key is reported with its line number.

--key takes the daemon's public key file (audit.key.pub in its state
directory); without it a rewritten log that signs itself is not detected.
--head takes the daemon's head file (audit.head): with it, a log truncated
past its last checkpoint is detected too.

Lines after the last signed checkpoint are covered by no signature: anyone
who can write the file can rewrite them undetected. A running daemon signs
a checkpoint at least every 100 events and within 1 s of an event, so only
a log whose writer crashed (or is still writing) has such lines; verify
reports them as NOT SEALED.

Exits 0 when intact and sealed, 1 when not intact, 2 when intact up to its
last checkpoint with an unsealed tail.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts audit.VerifyOptions
			if keyPath != "" {
				k, err := audit.ReadPublicKey(keyPath)
				if err != nil {
					return err
				}
				opts.PublicKey = k
			}
			if headPath != "" {
				h, err := audit.ReadHead(headPath)
				if err != nil {
					return err
				}
				if opts.PublicKey != nil {
					if err := audit.VerifyHead(h, opts.PublicKey); err != nil {
						return err
					}
				}
				opts.Head = &h
			}
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("open audit log: %w", err)
			}
			defer f.Close()
			rep, err := audit.Verify(f, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				e := json.NewEncoder(out)
				e.SetIndent("", "  ")
				if err := e.Encode(rep); err != nil {
					return err
				}
			} else {
				printReport(out, args[0], rep, opts.PublicKey)
			}
			switch {
			case !rep.OK():
				return &exitError{code: exitAuditBroken}
			case rep.Unsealed > 0:
				return &exitError{code: exitAuditUnsealed}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the daemon's public key file (or its private key file)")
	cmd.Flags().StringVar(&headPath, "head", "", "the daemon's head file, to detect truncation past the last checkpoint")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printReport(w io.Writer, name string, rep audit.Report, key ed25519.PublicKey) {
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "%s:%d: %s\n", name, p.Line, p.Msg)
	}
	for _, n := range rep.Recovered {
		fmt.Fprintf(w, "%s:%d: note: a torn tail left by a crash was cut off here when the log was reopened\n", name, n)
	}

	if key == nil {
		fmt.Fprintf(w, "%s: note: no --key given: checkpoints were checked against the key the log names itself, which does not detect a rewrite\n", name)
	}
	switch {
	case !rep.OK():
		fmt.Fprintf(w, "%s: NOT INTACT: %d problem(s) in %d lines\n", name, len(rep.Problems), rep.Lines)
	case rep.Unsealed > 0:
		fmt.Fprintf(w, "%s: NOT SEALED: intact up to the last checkpoint (line %d), but the %d line(s) after it are covered by no signature: anyone who can write the file could have rewritten them (the writer crashed, or is still writing: a running daemon seals within 1 s or 100 events)\n",
			name, rep.LastCheckpoint, rep.Unsealed)
	default:
		fmt.Fprintf(w, "%s: OK: %d lines, %d checkpoints\n", name, rep.Lines, rep.Checkpoints)
	}
}

func newAuditTailCmd() *cobra.Command {
	var follow bool
	var n int
	cmd := &cobra.Command{
		Use:   "tail FILE",
		Short: "Print the last events of an audit log, and follow it with -f",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("open audit log: %w", err)
			}
			defer f.Close()
			out := cmd.OutOrStdout()
			br := bufio.NewReaderSize(f, 1<<20)
			var ring []string
			var partial string
			for {
				line, err := br.ReadString('\n')
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("read audit log: %w", err)
				}
				if errors.Is(err, io.EOF) {
					partial = line
					break
				}
				ring = append(ring, line)
				if len(ring) > n {
					ring = ring[1:]
				}
			}
			for _, l := range ring {
				fmt.Fprint(out, visibleJSON(l))
			}
			if !follow {
				return nil
			}
			ctx := cmd.Context()
			for {
				line, err := br.ReadString('\n')
				partial += line
				if err == nil {
					fmt.Fprint(out, visibleJSON(partial))
					partial = ""
					continue
				}
				if !errors.Is(err, io.EOF) {
					return fmt.Errorf("read audit log: %w", err)
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they are appended")
	cmd.Flags().IntVarP(&n, "lines", "n", 10, "how many of the last events to print")
	return cmd
}

// visibleJSON returns a line of JSON with every character a terminal
// would not show as itself (controls, bidi overrides and isolates,
// zero-width and other format characters, separators, unassigned code
// points) written as a \u escape: the same JSON value, and what the
// operator reads is what ran. Outside strings JSON has no such characters;
// bytes that are not UTF-8 (a damaged line) print as U+FFFD.
func visibleJSON(line string) string {
	var b strings.Builder
	for i, r := range line {
		switch {
		case r == '\n' && i == len(line)-1:
			b.WriteRune(r)
		case !unicode.IsGraphic(r):
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// exitDenied is what `airlock run` exits with when the policy (or the
// lack of a person to approve) refuses the run: EX_NOPERM of sysexits.h.
const exitDenied = 77

// runGuard is the policy and audit log of one `airlock run`.
type runGuard struct {
	pol            *policy.Policy
	log            *audit.Log
	sandbox        string
	stdout, stderr *auditHash
	rout, rerr     *policy.RedactWriter
}

// newRunGuard loads --policy (none: the safe defaults) and opens
// --audit-log (none: no log). The log's signing key is keyFile (empty:
// defaultAuditKey(); made with mode 0600 when missing, its public key next
// to it as .pub) and its head FILE.head.
func newRunGuard(policyFile, auditFile, keyFile string) (*runGuard, error) {
	g := &runGuard{pol: policy.Default()}
	if policyFile != "" {
		p, err := policy.Load(policyFile)
		if err != nil {
			return nil, err
		}
		g.pol = p
	}
	if auditFile != "" {
		key, _, err := loadAuditKey(keyFile)
		if err != nil {
			return nil, err
		}
		if g.log, err = audit.Open(auditFile, audit.Options{Key: key, HeadPath: auditFile + ".head"}); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *runGuard) record(ctx context.Context, ev audit.Event) error {
	if g.log == nil {
		return nil
	}
	ev.Key = "cli"
	if ev.Sandbox == "" {
		ev.Sandbox = g.sandbox
	}
	return g.log.Append(context.WithoutCancel(ctx), ev)
}

// check decides a create and the exec of argv. A verdict of ask is a
// denial here: the one-shot CLI has nobody to ask.
func (g *runGuard) check(ctx context.Context, driver string, spec sandbox.Spec, argv []string) error {
	var mounts []string
	for _, m := range spec.Mounts {
		mode := "ro"
		if m.Writable {
			mode = "rw"
		}
		mounts = append(mounts, m.Source+":"+m.Target+":"+mode)
	}
	limits := spec.Limits
	for _, r := range []policy.Request{
		{Action: policy.ActionCreate, Driver: driver, Limits: &limits, Mounts: mounts, Network: &spec.Network, Key: "cli"},
		{Action: policy.ActionExec, Driver: driver, Argv: argv, Key: "cli"},
	} {
		d, err := g.pol.Decide(ctx, r)
		if err != nil {
			d = policy.Decision{Verdict: policy.Deny, Rule: d.Rule, Reason: err.Error()}
		}
		if d.Verdict == policy.Ask {
			d = policy.Decision{Verdict: policy.Deny, Rule: d.Rule, Reason: d.Reason + " (needs a person's approval; the one-shot CLI has no approver: run it through `airlock serve`)"}
		}
		ev := audit.Event{Kind: audit.KindPolicy, Decision: string(d.Verdict), Rule: d.Rule, Reason: string(r.Action) + ": " + d.Reason}
		if r.Action == policy.ActionExec {
			ev.Argv = g.pol.Redactor().Strings(argv)
		}
		if err := g.record(ctx, ev); err != nil {
			return err
		}
		if d.Verdict != policy.Allow {
			return &policy.Denied{Decision: d}
		}
	}
	return nil
}

// egress is the policy's decision on one request through the egress proxy
// (egress.Options.Policy): action "egress" of the key "cli". Nobody can
// approve here, so ask denies.
func (g *runGuard) egress(ctx context.Context, _, host string, port int) (bool, string, string) {
	d, err := g.pol.Decide(ctx, policy.Request{Action: policy.ActionEgress, Host: host, Port: port, Key: "cli"})
	switch {
	case err != nil:
		return false, d.Rule, "the policy could not be evaluated"
	case d.Verdict == policy.Ask:
		return false, d.Rule, d.Reason + " (needs a person's approval; the one-shot CLI has no approver)"
	}
	return d.Verdict == policy.Allow, d.Rule, d.Reason
}

// created records the sandbox's creation and returns writers that mask
// the policy's secrets in the output and hash it on its way to w.
func (g *runGuard) created(ctx context.Context, id string, stdout, stderr io.Writer) (io.Writer, io.Writer, error) {
	g.sandbox = id
	g.stdout, g.stderr = &auditHash{w: stdout, h: sha256.New()}, &auditHash{w: stderr, h: sha256.New()}
	g.rout, g.rerr = g.pol.Redactor().Writer(g.stdout), g.pol.Redactor().Writer(g.stderr)
	return g.rout, g.rerr, g.record(ctx, audit.Event{Kind: audit.KindCreate})
}

// ran records the exec.
func (g *runGuard) ran(ctx context.Context, argv []string, res sandbox.Result, err error) {
	_, _ = g.rout.Flush(), g.rerr.Flush()
	ev := audit.ExecEvent("cli", g.sandbox, g.pol.Redactor().Strings(argv), "", "", res, nil, nil, err)
	if err == nil {
		ev.StdoutSHA256, ev.StderrSHA256 = hex.EncodeToString(g.stdout.h.Sum(nil)), hex.EncodeToString(g.stderr.h.Sum(nil))
	}
	_ = g.record(ctx, ev)
}

// close records the sandbox's end and closes the log.
func (g *runGuard) close(ctx context.Context) error {
	if g.log == nil {
		return nil
	}
	if g.sandbox != "" {
		_ = g.record(ctx, audit.Event{Kind: audit.KindDestroy, Reason: "the run ended"})
	}
	return g.log.Close()
}

// deniedExit reports a denial as `airlock run` does: one line on stderr
// naming the rule (or, with --json, reason "denied" and the rule in the
// message) and exit code 77.
func deniedExit(d *policy.Denied, asJSON bool, stdout, stderr io.Writer) error {
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(outcome{
			ExitCode: exitDenied, Reason: sandbox.Reason("denied"), LimitsHit: []sandbox.Limit{}, Layers: []sandbox.Layer{},
			Message:        fmt.Sprintf("denied by policy (%s): %s", d.Decision.Rule, d.Decision.Reason),
			StdoutEncoding: "utf-8", StderrEncoding: "utf-8",
		})
	} else {
		fmt.Fprintf(stderr, "airlock: denied by policy (%s): %s\n", d.Decision.Rule, d.Decision.Reason)
	}
	return &exitError{code: exitDenied}
}

type auditHash struct {
	w io.Writer
	h hash.Hash
}

func (a *auditHash) Write(p []byte) (int, error) {
	a.h.Write(p)
	if a.w == nil {
		return len(p), nil
	}
	return a.w.Write(p)
}

// addPolicyFlags adds --policy and --audit-log to `airlock run`.
func addPolicyFlags(cmd *cobra.Command, f *runFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.policyFile, "policy", "", "policy file (TOML, see examples/policies); without one the verifier's built-in checks deny. A denied run exits 77")
	fl.StringVar(&f.auditLog, "audit-log", "", "append this run's actions to an audit log (hash-chained JSON lines with signed checkpoints)")
	fl.StringVar(&f.auditKey, "audit-key", "", "the audit log's signing key (default $XDG_CONFIG_HOME/airlock/audit.key, or /var/lib/airlock-keys/audit.key as root: never next to the log)")
}

// guardFail turns a refusal of the guard into exit code 77, and anything
// else into airlock's own failure.
func guardFail(err error, asJSON bool, stdout, stderr io.Writer, fail func(error) error) error {
	var d *policy.Denied
	if errors.As(err, &d) {
		return deniedExit(d, asJSON, stdout, stderr)
	}
	return fail(err)
}

// defaultAuditKey is where the checkpoint signing key lives unless
// --audit-key says otherwise: $XDG_CONFIG_HOME/airlock/audit.key when
// that is set, else /var/lib/airlock-keys/audit.key as root, else
// ~/.config/airlock/audit.key. Never the directory of a log it signs:
// whoever holds a copy of the log (a backup, a shipped log directory)
// must not also hold what re-signs it.
func defaultAuditKey() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "airlock", "audit.key")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/airlock-keys/audit.key"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config", "airlock", "audit.key")
	}
	return filepath.Join(os.TempDir(), "airlock-audit.key")
}

// loadAuditKey loads or makes the key at path (default: defaultAuditKey),
// making its directory (mode 0700) when missing.
func loadAuditKey(path string) (ed25519.PrivateKey, string, error) {
	if path == "" {
		path = defaultAuditKey()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("make the audit key's directory: %w", err)
	}
	k, err := audit.LoadOrCreateKey(path)
	return k, path, err
}

// openDaemonGuard loads the daemon's policy (policyFile; empty: the safe
// defaults) and opens its audit log STATE-DIR/audit.log, sealed in
// STATE-DIR/audit.head and signed with the key at keyPath (empty:
// defaultAuditKey(); mode 0600, made when missing, its public key next to
// it as .pub). For `airlock serve`:
//
//	pol, alog, err := openDaemonGuard(f.stateDir, f.auditKey, f.policy, log)
//	... supervisor.Options{..., Policy: pol, Audit: alog}
//	defer alog.Close() // after sup.Close
func openDaemonGuard(stateDir, keyPath, policyFile string, log *slog.Logger) (*policy.Policy, *audit.Log, error) {
	pol := policy.Default()
	if policyFile != "" {
		var err error
		if pol, err = policy.Load(policyFile); err != nil {
			return nil, nil, err
		}
	}
	alog, err := openDaemonAudit(stateDir, keyPath, log)
	if err != nil {
		return nil, nil, err
	}
	return pol, alog, nil
}

// openDaemonAudit opens the daemon's audit log (see openDaemonGuard).
func openDaemonAudit(stateDir, keyPath string, log *slog.Logger) (*audit.Log, error) {
	if old := filepath.Join(stateDir, "audit.key"); keyPath == "" {
		if _, err := os.Stat(old); err == nil {
			return nil, fmt.Errorf("%s is the audit key of an earlier airlock, kept next to the log it signs; move it out of the state directory (mv %s %s; mv %s.pub %s.pub) or name it with --audit-key",
				old, old, defaultAuditKey(), old, defaultAuditKey())
		}
	}
	key, _, err := loadAuditKey(keyPath)
	if err != nil {
		return nil, err
	}
	return audit.Open(filepath.Join(stateDir, "audit.log"), audit.Options{
		Key: key, HeadPath: filepath.Join(stateDir, "audit.head"), Logger: log,
	})
}
