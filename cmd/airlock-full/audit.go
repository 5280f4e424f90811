package main

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/cli"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// Exit codes of `airlock audit verify`: the log is not intact, or it is
// intact up to its last checkpoint but lines after it are not sealed.
const (
	exitAuditBroken   = 1
	exitAuditUnsealed = 2
)

func init() { cli.RegisterCommand(newAuditCmd) }

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
				return &cli.ExitError{Code: exitAuditBroken}
			case rep.Unsealed > 0:
				return &cli.ExitError{Code: exitAuditUnsealed}
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
				fmt.Fprint(out, termsafe.JSON(l))
			}
			if !follow {
				return nil
			}
			ctx := cmd.Context()
			for {
				line, err := br.ReadString('\n')
				partial += line
				if err == nil {
					fmt.Fprint(out, termsafe.JSON(partial))
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

// openDaemonGuard loads the daemon's policy (policyFile; empty: the safe
// defaults) and opens its audit log STATE-DIR/audit.log, sealed in
// STATE-DIR/audit.head and signed with the key at keyPath (empty:
// cli.DefaultAuditKey(); mode 0600, made when missing, its public key next to
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
				old, old, cli.DefaultAuditKey(), old, cli.DefaultAuditKey())
		}
	}
	key, _, err := cli.LoadAuditKey(keyPath)
	if err != nil {
		return nil, err
	}
	return audit.Open(filepath.Join(stateDir, "audit.log"), audit.Options{
		Key: key, HeadPath: filepath.Join(stateDir, "audit.head"), Logger: log,
	})
}
