package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/policy"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/tty"
)

type runFlags struct {
	driver, memory, disk, tmp, outputLimit, workdir, root string
	module                                                string
	image, runtime, kubeconfig                            string
	cpus                                                  float64
	pids                                                  int
	timeout, cpuTime                                      time.Duration
	env, mounts, degraded                                 []string
	json                                                  bool
	// tty runs the command on a terminal (-t); timeoutSet says --timeout
	// was given (a command on a terminal has no time limit otherwise).
	tty, timeoutSet bool
	// Network flags (addNetworkFlags).
	network, egressMode    string
	allowHosts, allowAddrs []string
	// Policy and audit flags (addPolicyFlags).
	policyFile, auditLog, auditKey string
}

func init() { RegisterCommand(newRunCmd) }

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in a fresh sandbox, then destroy it",
		Long: `Run one command in a fresh sandbox, stream its output, destroy the sandbox,
and exit with the command's exit code. 128+N when airlock killed it with
signal N (the reason follows on stderr as one "airlock: ..." line); 125 when
airlock itself failed; 126 when the command is not executable and 127 when
it is not found inside the sandbox.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if f.module != "" {
				return nil // the module is the command; ARGS may be none
			}
			return cobra.MinimumNArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.timeoutSet = cmd.Flags().Changed("timeout")
			if d := FlagDrivers("module"); f.module != "" && !cmd.Flags().Changed("driver") && len(d) > 0 {
				f.driver = d[0]
			}
			if handOff != nil && (!haveDriver(f.driver) || (f.policyFile != "" && !policy.EvaluatesRules()) || (f.image != "" && resolveImage == nil)) {
				// A driver this program does not link, or a policy's
				// rules without CEL to evaluate them: the complete
				// airlock's to run.
				return handOff(os.Args)
			}
			if f.module != "" {
				var err error
				if args, err = f.moduleArgv(args); err != nil {
					return err
				}
			}
			return runOne(cmd.Context(), f, args, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false)
	fl.StringVar(&f.driver, "driver", DefaultDriver, driverHelp())
	fl.StringVar(&f.module, "module", "", flagHelp("module", "run this WASI command module (a .wasm file) with ARGS as its arguments, on the driver named here unless --driver names another"))
	fl.StringVar(&f.image, "image", "", flagHelp("image", "the image of the sandbox"))
	fl.StringVar(&f.runtime, "runtime", "", flagHelp("runtime", "the runtime the sandbox's image runs on"))
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", flagHelp("kubeconfig", "the kubeconfig file naming the cluster"))
	fl.StringVar(&f.memory, "memory", "512M", "memory limit (no swap)")
	fl.Float64Var(&f.cpus, "cpus", sandbox.DefaultCPUs, "CPU quota in cores")
	fl.IntVar(&f.pids, "pids", sandbox.DefaultPids, "process and thread limit")
	fl.DurationVar(&f.timeout, "timeout", sandbox.DefaultTimeout, "wall-time limit of the command")
	fl.DurationVar(&f.cpuTime, "cpu-time", 0, "user+system CPU-time limit of the command (0: none)")
	fl.StringVar(&f.disk, "disk", "256M", "size of /workspace")
	fl.StringVar(&f.tmp, "tmp", "64M", "size of /tmp")
	fl.StringVar(&f.outputLimit, "output-limit", "1M", "limit of each output stream; past it the command is killed")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set KEY=VALUE in the command's environment, or copy KEY from yours (repeatable)")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox (default /workspace)")
	fl.StringArrayVar(&f.mounts, "mount", nil, "make a host path visible: HOST:PATH[:ro|:rw|:cow], read-only by default; cow: the sandbox writes a layer of its own, applied to the host only after review (airlock sandbox changes; daemon sandboxes) (repeatable)")
	fl.StringVar(&f.root, "root", "", "host directory to use as the read-only root file system (default: the host's /usr and an /etc allowlist)")
	fl.StringArrayVar(&f.degraded, "allow-degraded", nil, "run without this isolation layer if the host lacks it (repeatable): "+layerList())
	fl.BoolVar(&f.json, "json", false, "print one JSON object with the outcome instead of streaming")
	fl.BoolVarP(&f.tty, "tty", "t", false, "run the command on a terminal and type into it from yours, in raw mode (Ctrl-\\ leaves and kills it); no time limit unless --timeout is given")
	addNetworkFlags(cmd, &f)
	addPolicyFlags(cmd, &f)
	return cmd
}

func layerList() string {
	var s []string
	for _, l := range sandbox.DegradableLayers {
		s = append(s, string(l))
	}
	return strings.Join(s, ", ")
}

// outcome is what --json prints.
type outcome struct {
	ExitCode        int             `json:"exit_code"`
	Signal          *string         `json:"signal"`
	Reason          sandbox.Reason  `json:"reason"`
	LimitsHit       []sandbox.Limit `json:"limits_hit"`
	Message         string          `json:"message"`
	Stdout          string          `json:"stdout"`
	Stderr          string          `json:"stderr"`
	StdoutEncoding  string          `json:"stdout_encoding"`
	StderrEncoding  string          `json:"stderr_encoding"`
	StdoutTruncated bool            `json:"stdout_truncated"`
	StderrTruncated bool            `json:"stderr_truncated"`
	Layers          []sandbox.Layer `json:"layers"`
	Usage           sandbox.Usage   `json:"usage"`
}

func runOne(ctx context.Context, f runFlags, argv []string, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	out := outcome{LimitsHit: []sandbox.Limit{}, Layers: []sandbox.Layer{}}
	fail := func(err error) error {
		if !f.json {
			return err
		}
		out.ExitCode, out.Reason, out.Message = ExitAirlock, sandbox.ReasonError, err.Error()
		out.StdoutEncoding, out.StderrEncoding = "utf-8", "utf-8"
		_ = json.NewEncoder(stdout).Encode(out)
		return &ExitError{ExitAirlock}
	}
	var term *Session
	if f.tty {
		if f.json {
			return fail(errors.New("-t and --json do not go together: a terminal's output is for a person"))
		}
		term, ctx = NewSession(ctx, stdin, stdout)
		defer term.End()
		// Leaving before the command runs stops the making of the sandbox.
		defer func() {
			if term.HasLeft() && err != nil {
				var ee *ExitError
				if !errors.As(err, &ee) {
					fmt.Fprintln(stderr, LeftMessage("the command did not start"))
					err = &ExitError{ExitAirlock}
				}
			}
		}()
	}
	spec, err := f.spec()
	if err != nil {
		return fail(err)
	}
	env, err := f.environ()
	if err != nil {
		return fail(err)
	}
	guard, err := newRunGuard(f.policyFile, f.auditLog, f.auditKey)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = guard.close(context.WithoutCancel(ctx)) }()
	if err := guard.check(ctx, f.driver, spec, argv); err != nil {
		return guardFail(err, f.json, stdout, stderr, fail)
	}
	var progress io.Writer
	if !f.json {
		progress = stderr
	}
	drv, err := NewDriver(f.driver, DriverOptions{Egress: egress.New(egress.Options{Policy: guard.egress}), Kubeconfig: f.kubeconfig, Progress: progress})
	if err != nil {
		return fail(err)
	}
	// What the driver cannot do is refused before it makes the sandbox.
	caps := drv.Capabilities()
	if caps.ImageRoot && spec.Image != "" {
		if spec, f.workdir, guard.imageDigest, err = withImage(ctx, spec, f.workdir, stderr, f.json); err != nil {
			return fail(err)
		}
	}
	if err := caps.CheckSpec(f.driver, spec); err != nil {
		return fail(err)
	}
	if f.tty {
		if err := caps.CheckExec(f.driver, sandbox.ExecRequest{Argv: argv, PTY: &sandbox.TermSize{}}); err != nil {
			return fail(err)
		}
	}
	req := sandbox.ExecRequest{Argv: argv, Env: env, Dir: f.workdir, Stdin: stdin}
	var sb sandbox.Instance
	if rc, ok := drv.(sandbox.RunCreator); ok && !f.tty && guard.log == nil {
		// The command goes with the sandbox's config: it starts as soon as
		// the sandbox is built (docs/decisions.md, 91). An audit log
		// records the create before the command runs, so with one it is
		// sent after.
		sb, err = rc.CreateRun(ctx, spec, req)
	} else {
		sb, err = drv.Create(ctx, spec)
	}
	if err != nil {
		return fail(err)
	}
	defer sb.Close(context.WithoutCancel(ctx))

	var outBuf, errBuf bytes.Buffer
	if f.json {
		req.Stdout, req.Stderr = &outBuf, &errBuf
	} else {
		req.Stdout, req.Stderr = stdout, stderr
	}
	if req.Stdout, req.Stderr, err = guard.created(ctx, sb.ID(), spec.Image, req.Stdout, req.Stderr); err != nil {
		return fail(err)
	}
	var res sandbox.Result
	if f.tty {
		if f.timeoutSet {
			req.Timeout = f.timeout
		}
		var left bool
		res, left, err = runTerminal(ctx, term, sb, req)
		if left {
			guard.ran(context.WithoutCancel(ctx), argv, res, err)
			fmt.Fprintln(stderr, LeftMessage("the command was killed"))
			return ExitWith(128 + 9)
		}
	} else {
		res, err = sandbox.Run(ctx, sb, req)
	}
	guard.ran(ctx, argv, res, err)
	if err != nil {
		return fail(err)
	}
	if caps.CowMounts {
		reportDiscardedCow(ctx, sb, stderr)
	}
	code := exitCode(res)
	if !f.json {
		if res.Reason != sandbox.ReasonExit || res.Signal != "" || (code >= 126 && res.Message != "") {
			msg := res.Message
			if msg == "" {
				msg = string(res.Reason)
			}
			fmt.Fprintf(stderr, "airlock: %s\n", msg)
		}
		return ExitWith(code)
	}
	out.ExitCode, out.Reason, out.LimitsHit, out.Message = code, res.Reason, res.LimitsHit, res.Message
	if res.Signal != "" {
		out.Signal = &res.Signal
	}
	out.Stdout, out.StdoutEncoding = encode(outBuf.Bytes())
	out.Stderr, out.StderrEncoding = encode(errBuf.Bytes())
	out.StdoutTruncated, out.StderrTruncated = res.StdoutTruncated, res.StderrTruncated
	out.Layers, out.Usage = sb.Layers(), res.Usage
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return err
	}
	return ExitWith(code)
}

func ExitWith(code int) error {
	if code == 0 {
		return nil
	}
	return &ExitError{code}
}

// exitCode is the exit code airlock exits with for res: the command's own,
// or 128+N when a signal N ended it.
func exitCode(res sandbox.Result) int {
	if res.Signal != "" {
		if n, ok := sandbox.SignalNumber(res.Signal); ok {
			return 128 + int(n)
		}
		return 128 + 9
	}
	return res.ExitCode
}

func encode(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

func (f runFlags) spec() (sandbox.Spec, error) {
	var s sandbox.Spec
	var err error
	l := &s.Limits
	if l.MemoryBytes, err = ParseSize("--memory", f.memory); err != nil {
		return s, err
	}
	if l.DiskBytes, err = ParseSize("--disk", f.disk); err != nil {
		return s, err
	}
	if l.TmpBytes, err = ParseSize("--tmp", f.tmp); err != nil {
		return s, err
	}
	if l.OutputBytes, err = ParseSize("--output-limit", f.outputLimit); err != nil {
		return s, err
	}
	if !(f.cpus > 0) || math.IsInf(f.cpus, 0) || f.pids <= 0 || f.timeout <= 0 || f.cpuTime < 0 {
		return s, fmt.Errorf("--cpus, --pids and --timeout must be positive numbers, --cpu-time not negative")
	}
	l.CPUs, l.Pids, l.Timeout, l.CPUTime = f.cpus, f.pids, f.timeout, f.cpuTime
	s.Root = f.root
	if f.module != "" {
		if s.Module, err = filepath.Abs(f.module); err != nil {
			return s, fmt.Errorf("--module %q: %w", f.module, err)
		}
	}
	for _, fv := range []struct{ flag, value string }{{"image", f.image}, {"runtime", f.runtime}, {"kubeconfig", f.kubeconfig}} {
		if fv.value != "" && !Takes(f.driver, fv.flag) {
			return s, forDrivers(fv.flag, f.driver)
		}
	}
	s.Image, s.Runtime = f.image, f.runtime
	for _, m := range f.mounts {
		mt, err := ParseMount(m)
		if err != nil {
			return s, err
		}
		s.Mounts = append(s.Mounts, mt)
	}
	for _, d := range f.degraded {
		s.AllowDegraded = append(s.AllowDegraded, sandbox.Layer(d))
	}
	if s.Network, err = f.networkSpec(); err != nil {
		return s, err
	}
	return s, s.Validate()
}

// moduleArgv is the command that runs --module: its name (the file's name
// without .wasm), then args.
func (f runFlags) moduleArgv(args []string) ([]string, error) {
	if !Takes(f.driver, "module") {
		return nil, forDrivers("module", f.driver)
	}
	if !strings.HasSuffix(f.module, ".wasm") {
		return nil, fmt.Errorf("--module %q: give a .wasm file (a WASI command module)", f.module)
	}
	return append([]string{strings.TrimSuffix(filepath.Base(f.module), ".wasm")}, args...), nil
}

// environ turns --env flags into KEY=VALUE pairs; a bare KEY copies the
// caller's value. Nothing else of the caller's environment is passed.
func (f runFlags) environ() ([]string, error) {
	var env []string
	for _, e := range f.env {
		if strings.Contains(e, "=") {
			env = append(env, e)
			continue
		}
		if e == "" {
			return nil, errors.New("--env needs KEY=VALUE or KEY")
		}
		if v, ok := os.LookupEnv(e); ok {
			env = append(env, e+"="+v)
		}
	}
	return env, nil
}

// ParseMount reads HOST:PATH[:ro|:rw|:cow].
func ParseMount(s string) (sandbox.Mount, error) {
	m, err := sandbox.ParseMount(s)
	if err != nil {
		return m, fmt.Errorf("--mount %q: write HOST:PATH, HOST:PATH:ro, HOST:PATH:rw or HOST:PATH:cow (copy-on-write: changes reach the host when applied)", s)
	}
	return m, nil
}

// ParseSize reads a positive size like 256M, 1G or 512k (see
// sandbox.ParseSize).
func ParseSize(flag, s string) (int64, error) {
	n, err := sandbox.ParseSize(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q: give a positive size like 256M, 1G or 512k", flag, s)
	}
	return n, nil
}

// addNetworkFlags adds --network, --allow-host, --allow-address and
// --egress-mode.
func addNetworkFlags(cmd *cobra.Command, f *runFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.network, "network", "", `network mode: "none" (loopback only) or "egress" (an HTTP proxy that reaches only the allowed hosts); default none, or egress when an allow flag is given`)
	fl.StringArrayVar(&f.allowHosts, "allow-host", nil, "let the sandbox reach this host through the proxy: example.com, '*.pypi.org', either with :PORT (without one: 80 and 443) (repeatable; implies --network egress)")
	fl.StringArrayVar(&f.allowAddrs, "allow-address", nil, "let the sandbox reach this IP:PORT, even a private or loopback one (repeatable; implies --network egress)")
	fl.StringVar(&f.egressMode, "egress-mode", "enforce", `"enforce" refuses what the rules do not allow; "report" lets it through and logs it (private and metadata addresses stay blocked)`)
}

// networkSpec turns the network flags into the spec's Network.
func (f runFlags) networkSpec() (sandbox.Network, error) {
	n := sandbox.Network{Mode: sandbox.NetworkMode(f.network), AllowHosts: f.allowHosts, AllowAddresses: f.allowAddrs}
	if n.Mode == "" && (len(f.allowHosts) > 0 || len(f.allowAddrs) > 0 || f.egressMode == "report") {
		n.Mode = sandbox.NetworkEgress
	}
	switch f.egressMode {
	case "enforce", "":
	case "report":
		n.Report = true
	default:
		return n, fmt.Errorf("--egress-mode %q: use enforce or report", f.egressMode)
	}
	if n.Mode == sandbox.NetworkNone && (len(f.allowHosts) > 0 || len(f.allowAddrs) > 0) {
		return n, fmt.Errorf("--allow-host and --allow-address need --network egress, not --network none")
	}
	return n, n.Validate()
}

// runTerminal runs req on a terminal in sb, as the interactive session s
// on the caller's terminal (ctx is the session's). The command's output
// goes to req.Stdout. left says the caller left.
func runTerminal(ctx context.Context, s *Session, sb sandbox.Instance, req sandbox.ExecRequest) (res sandbox.Result, left bool, err error) {
	sz := s.Size()
	req.PTY = &sandbox.TermSize{Rows: sz.Rows, Cols: sz.Cols}
	if t := os.Getenv("TERM"); t != "" && !slices.ContainsFunc(req.Env, func(kv string) bool { return strings.HasPrefix(kv, "TERM=") }) {
		req.Env = append([]string{"TERM=" + t}, req.Env...)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	req.Stdin = pr
	p, err := sb.Start(ctx, req)
	if err != nil {
		var ce *sandbox.CommandError
		if errors.As(err, &ce) {
			return ce.Result(), false, nil
		}
		return sandbox.Result{}, s.HasLeft(), err
	}
	send := func(b []byte) error { _, err := pw.Write(b); return err }
	resize := func(sz tty.Size) error {
		if rz, ok := p.(sandbox.Resizer); ok {
			return rz.Resize(ctx, sandbox.TermSize{Rows: sz.Rows, Cols: sz.Cols})
		}
		return nil
	}
	if err := s.Begin(ctx, send, resize); err != nil {
		s.cancel()
	}
	// The caller left, or airlock was told to stop: it is killed, and the
	// result says so.
	res, err = sandbox.WaitOrKill(ctx, p)
	if err != nil && ctx.Err() != nil {
		err = nil
	}
	s.End()
	return res, s.HasLeft(), err
}
