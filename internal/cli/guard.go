package cli

// The policy and audit log of a one-shot `airlock run` (the daemon's are
// in audit.go).

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ExitDenied is what `airlock run` exits with when the policy (or the
// lack of a person to approve) refuses the run: EX_NOPERM of sysexits.h.
const ExitDenied = 77

// runGuard is the policy and audit log of one `airlock run`.
type runGuard struct {
	pol            *policy.Policy
	log            *audit.Log
	sandbox        string
	stdout, stderr *auditHash
	rout, rerr     *policy.RedactWriter
	// imageDigest is the digest of the image unpacked for the sandbox,
	// for its create event.
	imageDigest string
}

// newRunGuard loads --policy (none: the safe defaults) and opens
// --audit-log (none: no log). The log's signing key is keyFile (empty:
// DefaultAuditKey(); made with mode 0600 when missing, its public key next
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
		key, _, err := LoadAuditKey(keyFile)
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
		mounts = append(mounts, m.String())
	}
	limits := spec.Limits
	for _, r := range []policy.Request{
		{Action: policy.ActionCreate, Driver: driver, Image: spec.Image, Limits: &limits, Mounts: mounts, Network: &spec.Network, Key: "cli"},
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
func (g *runGuard) created(ctx context.Context, id, image string, stdout, stderr io.Writer) (io.Writer, io.Writer, error) {
	g.sandbox = id
	g.stdout, g.stderr = &auditHash{w: stdout, h: sha256.New()}, &auditHash{w: stderr, h: sha256.New()}
	g.rout, g.rerr = g.pol.Redactor().Writer(g.stdout), g.pol.Redactor().Writer(g.stderr)
	return g.rout, g.rerr, g.record(ctx, audit.Event{Kind: audit.KindCreate, Image: image, ImageDigest: g.imageDigest})
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
			ExitCode: ExitDenied, Reason: sandbox.Reason("denied"), LimitsHit: []sandbox.Limit{}, Layers: []sandbox.Layer{},
			Message:        fmt.Sprintf("denied by policy (%s): %s", d.Decision.Rule, d.Decision.Reason),
			StdoutEncoding: "utf-8", StderrEncoding: "utf-8",
		})
	} else {
		fmt.Fprintf(stderr, "airlock: denied by policy (%s): %s\n", d.Decision.Rule, d.Decision.Reason)
	}
	return &ExitError{Code: ExitDenied}
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

// DefaultAuditKey is where the checkpoint signing key lives unless
// --audit-key says otherwise: $XDG_CONFIG_HOME/airlock/audit.key when
// that is set, else /var/lib/airlock-keys/audit.key as root, else
// ~/.config/airlock/audit.key. Never the directory of a log it signs:
// whoever holds a copy of the log (a backup, a shipped log directory)
// must not also hold what re-signs it.
func DefaultAuditKey() string {
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

// LoadAuditKey loads or makes the key at path (default: DefaultAuditKey),
// making its directory (mode 0700) when missing.
func LoadAuditKey(path string) (ed25519.PrivateKey, string, error) {
	if path == "" {
		path = DefaultAuditKey()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("make the audit key's directory: %w", err)
	}
	k, err := audit.LoadOrCreateKey(path)
	return k, path, err
}
