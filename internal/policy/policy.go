// Package policy decides whether an action may happen: allow, deny (with
// the rule and a reason the agent sees) or ask a person.
//
// A Policy is read from a TOML file (see examples/policies/). It has, in
// the order Decide applies them:
//
//   - allowlists: drivers, templates, languages, commands (argv patterns)
//     and mounts; a request outside a non-empty list is denied;
//   - ceilings on limits: a create asking for more is denied, never lowered;
//   - rules: CEL expressions over the Request, each with a decision;
//   - the verifier's built-in checks on code and command lines (Checks),
//     each set to deny, ask or off;
//   - an optional webhook that is asked last, with a timeout after which
//     the policy's default applies.
//
// It also names secrets to mask in exec output and the audit log (Redact).
//
// Precedence: the strictest verdict of everything that matched wins (deny
// over ask over allow); the first match of that verdict names the rule.
// When nothing matched, Default applies ("allow" unless set).
//
// With no policy file at all, Default() applies: no allowlists or ceilings,
// and every built-in check set to deny.
package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Action is what a Request asks to do.
type Action string

// The actions.
const (
	ActionCreate     Action = "create"
	ActionExec       Action = "exec"
	ActionFileWrite  Action = "file_write"
	ActionFileDelete Action = "file_delete"
	ActionEgress     Action = "egress"
	// ActionExpose is a connection from outside to a port of the sandbox
	// (an exposed port, E2B's getHost), asked with Port, and with Key and
	// Labels of the sandbox's owner.
	ActionExpose Action = "expose"
)

// Request is what an action asks. In rules it is seen as these variables:
//
//	action   string               "create", "exec", "file_write", "file_delete", "egress", "expose"
//	sandbox  string               the sandbox id ("" on create)
//	template string               the sandbox's template
//	driver   string               the sandbox's driver
//	argv     list(string)         the command line (for code: the interpreter's argv)
//	code     string               the program text of a code exec
//	language string               its language ("python", "bash", "sh")
//	path     string               the file written or deleted; on exec, the command's working
//	                              directory. Of a sandbox, always absolute and clean, and its home
//	                              (/home/user of E2B's) written as /workspace, the same files
//	host     string               the host of an egress request (a name or an IP literal)
//	port     int                  its port; of an expose, the sandbox's port connected to
//	key      string               the id of the API key that asked
//	limits   map(string, double)  a create's limits: memory_bytes, cpus, pids, timeout_seconds,
//	                              cpu_time_seconds, disk_bytes, tmp_bytes, output_bytes, open_files;
//	                              on exec, timeout_seconds is the command's wall-time limit (0 for a
//	                              background process that has none) and the others are 0
//	network  string               a create's network mode: "none" or "egress"
//	explicit bool                 a create named its driver itself (tiers never change it)
//	labels   map(string, string)  the labels of the API key that asked (keys create --label)
//
// A rule that fails to evaluate (an index past the end of argv, say)
// denies.
type Request struct {
	Action   Action   `json:"action"`
	Sandbox  string   `json:"sandbox,omitempty"`
	Template string   `json:"template,omitempty"`
	Driver   string   `json:"driver,omitempty"`
	Argv     []string `json:"argv,omitempty"`
	Code     string   `json:"code,omitempty"`
	Language string   `json:"language,omitempty"`
	Path     string   `json:"path,omitempty"`
	Host     string   `json:"host,omitempty"`
	// Port is the port of an egress request, or of an expose.
	Port int `json:"port,omitempty"`
	// Method is the HTTP method of an egress request the proxy can read
	// (plain HTTP, or HTTPS it intercepts), whose Path is then the
	// request's path (without the query); empty for a CONNECT.
	Method string `json:"method,omitempty"`
	Key    string `json:"key,omitempty"`
	// Limits are a create's limits (the template's, narrowed by the
	// request), or an exec's timeout (Timeout; zero for a background
	// process without one).
	Limits *sandbox.Limits `json:"limits,omitempty"`
	// Image is the image a create's sandbox runs (REF as given).
	Image string `json:"image,omitempty"`
	// Mounts are a create's host mounts, as "HOST:PATH[:ro|:rw]".
	Mounts []string `json:"mounts,omitempty"`
	// Network is a create's network (the template's, or what it asks for).
	Network *sandbox.Network `json:"network,omitempty"`
	// Explicit says a create named its driver itself, rather than taking
	// its template's.
	Explicit bool `json:"explicit,omitempty"`
	// Labels are the labels of the API key that asked.
	Labels map[string]string `json:"labels,omitempty"`
}

// Verdict is a Decision's outcome.
type Verdict string

// The verdicts, from least to most strict.
const (
	Allow Verdict = "allow"
	Ask   Verdict = "ask"
	Deny  Verdict = "deny"
)

func (v Verdict) rank() int {
	switch v {
	case Deny:
		return 2
	case Ask:
		return 1
	}
	return 0
}

// Decision is Decide's answer.
type Decision struct {
	Verdict Verdict `json:"decision"`
	// Rule names what decided: "rule:NAME", "check:NAME", "commands",
	// "ceiling:memory", "webhook", "default".
	Rule string `json:"rule"`
	// Reason is one line the agent can read and act on.
	Reason string `json:"reason"`
}

// Denied is the error an action refused by policy (or by a person) fails
// with. It is not a failure of airlock: callers report it as "denied".
type Denied struct {
	Decision Decision
}

func (e *Denied) Error() string {
	return fmt.Sprintf("denied by policy (%s): %s", e.Decision.Rule, e.Decision.Reason)
}

// ErrDenied matches every *Denied with errors.Is.
var ErrDenied = errors.New("denied by policy")

// Is makes errors.Is(err, ErrDenied) true for a *Denied.
func (e *Denied) Is(target error) bool { return target == ErrDenied }

// File is the policy file's schema (TOML).
type File struct {
	// Default is the verdict when nothing matched: "allow" (the default)
	// or "deny" (then only what an allow rule matches may happen).
	Default   Verdict  `toml:"default"`
	Drivers   []string `toml:"drivers"`
	Templates []string `toml:"templates"`
	Languages []string `toml:"languages"`
	// Commands are argv patterns: space-separated globs matched one per
	// argument ("python3 *.py"); a last "**" matches any further arguments.
	// They apply to every exec: a code exec is matched by the command line
	// that runs it ("python3 -c CODE", "bash -c CODE", "sh -c CODE"), so
	// "python3 **" lets Python code run and shell code needs "sh **" or
	// "bash **". Languages narrows code execs further.
	Commands []string `toml:"commands"`
	// Mounts are the host mounts a create may ask for: "HOST:PATH:ro",
	// "HOST:PATH:rw" (which also allows ro and cow) or "HOST:PATH:cow"
	// (copy-on-write: the sandbox's writes reach the host only when they
	// are applied). Empty allows any a template names; a create through
	// the API may ask only for those listed here.
	Mounts []string `toml:"mounts"`
	// Images are the images a create may run (a template's image = "REF",
	// `airlock run --image`), as globs over the repository
	// ("registry.example/team/*": "*" within one path element, a last
	// "/**" any deeper; Docker Hub's short names are docker.io/library/…).
	// Empty allows any image.
	Images []string `toml:"images"`
	// RequireImageDigest refuses an image not named by digest
	// (REF@sha256:…).
	RequireImageDigest bool `toml:"require_image_digest"`
	// Network, when set, bounds every sandbox's egress (see Network); nil
	// leaves it to the templates.
	Network  *Network `toml:"network"`
	Ceilings Ceilings `toml:"ceilings"`
	Checks   Checks   `toml:"checks"`
	Rules    []Rule   `toml:"rule"`
	// Tiers choose the driver of a create (see Tier).
	Tiers    []Tier   `toml:"tier"`
	Approval Approval `toml:"approval"`
	Cow      Cow      `toml:"cow"`
	Webhook  Webhook  `toml:"webhook"`
	Redact   Redact   `toml:"redact"`
}

// Ceilings bound a create's limits. Zero fields bound nothing. Sizes are
// like "512M"; durations like "30s".
type Ceilings struct {
	Memory      string  `toml:"memory"`
	CPUs        float64 `toml:"cpus"`
	Pids        int     `toml:"pids"`
	Timeout     string  `toml:"timeout"`
	CPUTime     string  `toml:"cpu_time"`
	Disk        string  `toml:"disk"`
	Tmp         string  `toml:"tmp"`
	OutputLimit string  `toml:"output_limit"`
	OpenFiles   int     `toml:"open_files"`
}

// Rule is a CEL expression over the Request and what to do when it is true.
type Rule struct {
	Name string `toml:"name"`
	// When is a CEL expression that must evaluate to a bool.
	When string `toml:"when"`
	// Decision is "allow", "deny" or "ask".
	Decision Verdict `toml:"decision"`
	// Reason is what the agent is told.
	Reason string `toml:"reason"`
}

// Tier chooses the driver of a create: the first tier whose When is true
// names the driver, in place of the template's. A create that names its
// driver itself keeps it (a tier never changes it silently); the rules and
// allowlists then allow or refuse it like any other.
type Tier struct {
	Name string `toml:"name"`
	// When is a CEL expression over the create's Request.
	When string `toml:"when"`
	// Driver is the driver the create runs on when When is true.
	Driver string `toml:"driver"`
	// Reason says why, for the audit log and the create's answer.
	Reason string `toml:"reason"`
}

// Approval configures actions that ask a person.
type Approval struct {
	// Timeout is how long an action waits for a person before it is
	// denied. Empty means five minutes.
	Timeout string `toml:"timeout"`
	// Mounts are host directories whose copy-on-write mounts' changes
	// only an operator may apply or discard ("*": every one). Empty:
	// the sandbox's owner decides.
	Mounts []string `toml:"mounts"`
	// Elicit lets the person in an MCP client that supports elicitation
	// decide the asks of that client's own tool calls, in the client (the
	// answer is audited as an approval by "mcp-elicitation"). False: on
	// the daemon only operators decide (the console, the API); `airlock
	// mcp`, where nobody else could, asks the client whatever this says.
	Elicit bool `toml:"elicit"`
}

// Cow configures what an apply of a copy-on-write mount's changes writes
// on the host.
type Cow struct {
	// SharedWrite are host directories ("*": every one) whose applies
	// keep the group and world write bits the sandbox gave a file or
	// directory. Empty: apply clears them (a sandbox's 0666 becomes 0644),
	// except those the host's entry had already.
	SharedWrite []string `toml:"shared_write"`
}

// MaxRuleCost bounds the work one rule may do on one request (CEL's cost
// units, about one per operation or byte scanned); a rule past it fails,
// and so denies.
const MaxRuleCost = 1_000_000

// Policy is a loaded, compiled policy. It is safe for concurrent use.
type Policy struct {
	f               File
	rules           []compiled
	tiers           []compiledTier
	ceilings        []ceiling
	approvalTimeout time.Duration
	hook            *webhook
	redactor        *Redactor
}

type compiled struct {
	Rule
	when Condition
}

type compiledTier struct {
	Tier
	when Condition
}

// Condition is a compiled `when` expression (celrules).
type Condition interface {
	// Holds evaluates it with vars; a result that is not true is false.
	Holds(ctx context.Context, vars map[string]any) (bool, error)
}

// Compiler makes what compiles one `when` expression (what names the rule
// or tier, for errors).
type Compiler func() (func(what, expr string) (Condition, error), error)

// newCompiler is the compiler of rules and tiers: none until a package
// that evaluates them (celrules) is linked.
var newCompiler Compiler = func() (func(what, expr string) (Condition, error), error) {
	return nil, errors.New("this airlock cannot evaluate policy rules or tiers (it links no CEL): run the complete airlock, airlock-full")
}

// evaluates says whether UseCompiler was called.
var evaluates bool

// UseCompiler makes c the compiler of rules and tiers. celrules calls it as
// it initialises, so that a program that links it evaluates them.
func UseCompiler(c Compiler) { newCompiler, evaluates = c, true }

// EvaluatesRules says whether this program can evaluate rules and tiers:
// whether it links celrules.
func EvaluatesRules() bool { return evaluates }

// Default returns the policy that applies with no policy file: every
// built-in check denies; nothing else is restricted.
func Default() *Policy {
	p, err := New(File{})
	if err != nil {
		panic(err) // the empty file always compiles
	}
	return p
}

// Load reads and compiles a policy file.
func Load(file string) (*Policy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	var f File
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", file, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("policy %s: unknown setting %q", file, und[0].String())
	}
	p, err := New(f)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", file, err)
	}
	return p, nil
}

// New compiles f.
func New(f File) (*Policy, error) {
	switch f.Default {
	case "":
		f.Default = Allow
	case Allow, Deny, Ask:
	default:
		return nil, fmt.Errorf("default %q: use allow, deny or ask", f.Default)
	}
	if err := f.Checks.validate(); err != nil {
		return nil, err
	}
	if err := f.Network.check(); err != nil {
		return nil, err
	}
	p := &Policy{f: f, approvalTimeout: 5 * time.Minute}
	if f.Approval.Timeout != "" {
		d, err := time.ParseDuration(f.Approval.Timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("approval timeout %q: use a positive duration like \"5m\"", f.Approval.Timeout)
		}
		p.approvalTimeout = d
	}
	// The CEL environment is made only for a policy with expressions:
	// making it costs a one-shot `airlock run` more than its sandbox.
	var compile func(what, expr string) (Condition, error)
	var err error
	if len(f.Tiers)+len(f.Rules) > 0 {
		if compile, err = newCompiler(); err != nil {
			return nil, err
		}
	}
	tierNames := map[string]bool{}
	for i, t := range f.Tiers {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("tier %d has no name", i+1)
		case tierNames[t.Name]:
			return nil, fmt.Errorf("tier %q is defined twice", t.Name)
		case t.Driver == "":
			return nil, fmt.Errorf("tier %q names no driver: set driver = \"wasm\", \"native\", \"gvisor\"…", t.Name)
		}
		tierNames[t.Name] = true
		when, err := compile(fmt.Sprintf("tier %q", t.Name), t.When)
		if err != nil {
			return nil, err
		}
		p.tiers = append(p.tiers, compiledTier{Tier: t, when: when})
	}
	seen := map[string]bool{}
	for i, r := range f.Rules {
		if r.Name == "" {
			return nil, fmt.Errorf("rule %d has no name", i+1)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %q is defined twice", r.Name)
		}
		seen[r.Name] = true
		switch r.Decision {
		case Allow, Deny, Ask:
		default:
			return nil, fmt.Errorf("rule %q: decision %q: use allow, deny or ask", r.Name, r.Decision)
		}
		when, err := compile(fmt.Sprintf("rule %q", r.Name), r.When)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, compiled{Rule: r, when: when})
	}
	if p.ceilings, err = f.Ceilings.compile(); err != nil {
		return nil, err
	}
	if err := checkImagePatterns(f.Images); err != nil {
		return nil, err
	}
	for _, m := range f.Mounts {
		if _, _, _, err := splitMount(m); err != nil {
			return nil, fmt.Errorf("mounts: %w", err)
		}
	}
	if p.redactor, err = f.Redact.compile(); err != nil {
		return nil, err
	}
	if f.Webhook.URL != "" {
		if p.hook, err = newWebhook(f.Webhook); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// TierChoice is the policy's choice of a create's driver.
type TierChoice struct {
	// Driver is the driver the create runs on.
	Driver string `json:"driver"`
	// Rule names what chose it: "tier:NAME", "request" (the create named
	// it) or "template" (no tier matched).
	Rule string `json:"rule"`
	// Reason is the tier's reason, or what the rule means.
	Reason string `json:"reason"`
}

// ChooseDriver says which driver the create r runs on. r.Driver is the
// driver it would have: its own when r.Explicit (which no tier changes),
// else its template's, which the first tier whose expression is true
// replaces. A tier that cannot be evaluated is an error: the create is
// refused rather than run on a driver nobody chose.
func (p *Policy) ChooseDriver(ctx context.Context, r Request) (TierChoice, error) {
	if r.Explicit {
		return TierChoice{Driver: r.Driver, Rule: "request", Reason: "the create named its driver"}, nil
	}
	vars := r.vars()
	for _, t := range p.tiers {
		ok, err := t.when.Holds(ctx, vars)
		if err != nil {
			return TierChoice{Rule: "tier:" + t.Name}, fmt.Errorf("evaluate tier %q: %w", t.Name, err)
		}
		if ok {
			reason := t.Reason
			if reason == "" {
				reason = fmt.Sprintf("policy tier %q matched", t.Name)
			}
			return TierChoice{Driver: t.Driver, Rule: "tier:" + t.Name, Reason: reason}, nil
		}
	}
	return TierChoice{Driver: r.Driver, Rule: "template", Reason: "the template's driver; no policy tier matched"}, nil
}

// Redactor masks the secrets the policy names; nil when it names none.
func (p *Policy) Redactor() *Redactor { return p.redactor }

// MountAllowed says the policy's mounts allowlist names m
// ("HOST:PATH[:ro|:rw|:cow]"); false when the list is empty.
func (p *Policy) MountAllowed(m string) bool {
	return len(p.f.Mounts) > 0 && mountAllowed(p.f.Mounts, m)
}

// MountNeedsApproval says changes to a copy-on-write mount of the host
// directory source may be applied or discarded only by an operator.
func (p *Policy) MountNeedsApproval(source string) bool {
	for _, m := range p.f.Approval.Mounts {
		if m == "*" || path.Clean(m) == path.Clean(source) {
			return true
		}
	}
	return false
}

// MountKeepsSharedWrite says an apply of a copy-on-write mount of the host
// directory source keeps group and world write bits ([cow] shared_write).
func (p *Policy) MountKeepsSharedWrite(source string) bool {
	for _, m := range p.f.Cow.SharedWrite {
		if m == "*" || path.Clean(m) == path.Clean(source) {
			return true
		}
	}
	return false
}

// ApprovalTimeout is how long an action waits for a person.
func (p *Policy) ApprovalTimeout() time.Duration { return p.approvalTimeout }

// Elicit says whether the person in an MCP client may decide its own
// calls' asks (Approval.Elicit).
func (p *Policy) Elicit() bool { return p.f.Approval.Elicit }

// Decide says whether r may happen. An error means the policy could not be
// evaluated (a rule failed at run time); callers treat it as deny.
func (p *Policy) Decide(ctx context.Context, r Request) (Decision, error) {
	var best *Decision
	consider := func(d Decision) {
		if best == nil || d.Verdict.rank() > best.Verdict.rank() {
			best = &d
		}
	}
	for _, d := range p.static(r) {
		consider(d)
	}
	if best != nil && best.Verdict == Deny {
		return *best, nil
	}
	vars := r.vars()
	for _, c := range p.rules {
		ok, err := c.when.Holds(ctx, vars)
		if err != nil {
			return Decision{Verdict: Deny, Rule: "rule:" + c.Name, Reason: "the policy rule could not be evaluated"},
				fmt.Errorf("evaluate rule %q: %w", c.Name, err)
		}
		if ok {
			reason := c.Reason
			if reason == "" {
				reason = fmt.Sprintf("policy rule %q matched", c.Name)
			}
			consider(Decision{Verdict: c.Decision, Rule: "rule:" + c.Name, Reason: reason})
		}
	}
	var network Network
	if p.f.Network != nil {
		network = *p.f.Network
	}
	for _, f := range Verify(r, network) {
		v := p.f.Checks.verdict(f.Check)
		if v == "" {
			continue
		}
		consider(Decision{Verdict: v, Rule: "check:" + f.Check, Reason: f.Reason})
	}
	if best != nil && best.Verdict == Deny {
		return *best, nil
	}
	if p.hook != nil {
		consider(p.hook.decide(ctx, r, p.f.Default))
	}
	if best == nil {
		return Decision{Verdict: p.f.Default, Rule: "default", Reason: "no rule matched; the policy's default applies"}, nil
	}
	return *best, nil
}

// static applies the allowlists and ceilings.
func (p *Policy) static(r Request) []Decision {
	var out []Decision
	deny := func(rule, format string, a ...any) {
		out = append(out, Decision{Verdict: Deny, Rule: rule, Reason: fmt.Sprintf(format, a...)})
	}
	f := p.f
	if r.Driver != "" && len(f.Drivers) > 0 && !contains(f.Drivers, r.Driver) {
		deny("drivers", "driver %q is not allowed by policy (allowed: %s)", r.Driver, strings.Join(f.Drivers, ", "))
	}
	if r.Template != "" && len(f.Templates) > 0 && !contains(f.Templates, r.Template) {
		deny("templates", "template %q is not allowed by policy (allowed: %s)", r.Template, strings.Join(f.Templates, ", "))
	}
	if r.Action == ActionExec {
		if r.Language != "" && len(f.Languages) > 0 && !contains(f.Languages, r.Language) {
			deny("languages", "language %q is not allowed by policy (allowed: %s)", r.Language, strings.Join(f.Languages, ", "))
		}
		// A code exec is matched by the command line that runs it
		// (python3 -c CODE, bash -c CODE, sh -c CODE).
		argv := r.Argv
		if len(argv) == 0 && r.Code != "" {
			argv = []string{interpreter(r.Language), "-c", r.Code}
		}
		if len(f.Commands) > 0 && !matchAny(f.Commands, argv) {
			shown := strings.Join(argv, " ")
			if r.Code != "" {
				shown = argv[0] + " -c CODE (" + r.Language + " code)"
			}
			deny("commands", "command %q matches no allowed command pattern (allowed: %s)", shown, strings.Join(f.Commands, "; "))
		}
	}
	if r.Action == ActionCreate {
		f.imageDecisions(r.Image, deny)
		for _, m := range r.Mounts {
			if len(f.Mounts) > 0 && !mountAllowed(f.Mounts, m) {
				deny("mounts", "mount %q is not allowed by policy", m)
			}
		}
	}
	// A create's limits, and an exec's timeout (the other fields of an
	// exec's Limits are zero).
	if (r.Action == ActionCreate || r.Action == ActionExec) && r.Limits != nil {
		for _, c := range p.ceilings {
			if got := c.get(*r.Limits); got > c.max {
				deny("ceiling:"+c.name, "%s %s is above the policy's ceiling of %s: ask for less", c.name, c.show(got), c.show(c.max))
			}
		}
	}
	if n := f.Network; n != nil {
		switch {
		case r.Action == ActionCreate && r.Network != nil:
			if wide := n.wider(*r.Network); len(wide) > 0 {
				deny("network", "the sandbox's network allows %s, which the policy's [network] does not; ask for a network within it (allowed: %s)", strings.Join(wide, ", "), strings.Join(n.Allow, ", "))
			}
		case r.Action == ActionEgress:
			if why := n.egress(r.Host, r.Port); why != "" {
				deny("network", "%s", why)
			}
		}
	}
	return out
}

// interpreter is the program a code exec in language runs (as the
// supervisor runs it: python3 -c CODE, bash -c CODE, sh -c CODE).
func interpreter(language string) string {
	if language == "python" {
		return "python3"
	}
	return language
}

func (r Request) vars() map[string]any {
	var l0 sandbox.Limits
	l := &l0
	if r.Limits != nil {
		l = r.Limits
	}
	limits := map[string]float64{
		"memory_bytes": float64(l.MemoryBytes), "cpus": l.CPUs, "pids": float64(l.Pids),
		"timeout_seconds": l.Timeout.Seconds(), "cpu_time_seconds": l.CPUTime.Seconds(),
		"disk_bytes": float64(l.DiskBytes), "tmp_bytes": float64(l.TmpBytes),
		"output_bytes": float64(l.OutputBytes), "open_files": float64(l.OpenFiles),
	}
	argv := r.Argv
	if argv == nil {
		argv = []string{}
	}
	network := string(sandbox.NetworkNone)
	if r.Network != nil && r.Network.Mode != "" {
		network = string(r.Network.Mode)
	}
	labels := r.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return map[string]any{
		"action": string(r.Action), "sandbox": r.Sandbox, "template": r.Template, "driver": r.Driver,
		"argv": argv, "code": r.Code, "language": r.Language, "path": r.Path, "host": r.Host, "port": int64(r.Port), "method": r.Method,
		"key": r.Key, "limits": limits, "network": network, "explicit": r.Explicit, "labels": labels,
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// matchAny says argv matches one of the patterns.
func matchAny(patterns, argv []string) bool {
	for _, p := range patterns {
		if matchArgv(strings.Fields(p), argv) {
			return true
		}
	}
	return false
}

func matchArgv(pat, argv []string) bool {
	for i, g := range pat {
		if g == "**" && i == len(pat)-1 {
			return true
		}
		if i >= len(argv) {
			return false
		}
		if ok, _ := path.Match(g, argv[i]); !ok {
			return false
		}
	}
	return len(argv) == len(pat)
}

func splitMount(m string) (host, dst, mode string, err error) {
	parts := strings.Split(m, ":")
	switch len(parts) {
	case 2:
		parts = append(parts, "ro")
	case 3:
	default:
		return "", "", "", fmt.Errorf("mount %q: use HOST:PATH[:ro|:rw|:cow]", m)
	}
	if parts[2] != "ro" && parts[2] != "rw" && parts[2] != "cow" {
		return "", "", "", fmt.Errorf("mount %q: mode must be ro, rw or cow", m)
	}
	return parts[0], parts[1], parts[2], nil
}

func mountAllowed(allowed []string, m string) bool {
	h, d, mode, err := splitMount(m)
	if err != nil {
		return false
	}
	for _, a := range allowed {
		ah, ad, amode, _ := splitMount(a)
		if ah == h && ad == d && (amode == mode || amode == "rw" || (amode == "cow" && mode == "ro")) {
			return true
		}
	}
	return false
}

// hostIn says host (optionally "host:port") matches one of the patterns:
// "example.com", "*.example.com" (subdomains only), "example.com:443".
func hostIn(patterns []string, host string) bool {
	h, port := host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i+1:], "]") {
		h, port = host[:i], host[i+1:]
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	for _, p := range patterns {
		ph, pport := strings.ToLower(p), ""
		if i := strings.LastIndexByte(p, ':'); i >= 0 {
			ph, pport = strings.ToLower(p[:i]), p[i+1:]
		}
		if pport != "" && pport != port {
			continue
		}
		if ph == h || (strings.HasPrefix(ph, "*.") && strings.HasSuffix(h, ph[1:])) {
			return true
		}
	}
	return false
}

// ceiling is one compiled limit ceiling.
type ceiling struct {
	name string
	max  float64
	get  func(sandbox.Limits) float64
	show func(float64) string
}

func (c Ceilings) compile() ([]ceiling, error) {
	var out []ceiling
	size := func(name, s string, get func(sandbox.Limits) int64) error {
		if s == "" {
			return nil
		}
		n, err := sandbox.ParseSize(s)
		if err != nil {
			return fmt.Errorf("ceiling %s: %w", name, err)
		}
		out = append(out, ceiling{name, float64(n), func(l sandbox.Limits) float64 { return float64(get(l)) },
			func(f float64) string { return strconv.FormatInt(int64(f), 10) + " bytes" }})
		return nil
	}
	dur := func(name, s string, get func(sandbox.Limits) time.Duration) error {
		if s == "" {
			return nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("ceiling %s %q: use a duration like \"30s\"", name, s)
		}
		out = append(out, ceiling{name, d.Seconds(), func(l sandbox.Limits) float64 { return get(l).Seconds() },
			func(f float64) string { return time.Duration(f * float64(time.Second)).String() }})
		return nil
	}
	num := func(name string, n float64, get func(sandbox.Limits) float64) {
		if n > 0 {
			out = append(out, ceiling{name, n, get, func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }})
		}
	}
	for _, err := range []error{
		size("memory", c.Memory, func(l sandbox.Limits) int64 { return l.MemoryBytes }),
		size("disk", c.Disk, func(l sandbox.Limits) int64 { return l.DiskBytes }),
		size("tmp", c.Tmp, func(l sandbox.Limits) int64 { return l.TmpBytes }),
		size("output_limit", c.OutputLimit, func(l sandbox.Limits) int64 { return l.OutputBytes }),
		dur("timeout", c.Timeout, func(l sandbox.Limits) time.Duration { return l.Timeout }),
		dur("cpu_time", c.CPUTime, func(l sandbox.Limits) time.Duration { return l.CPUTime }),
	} {
		if err != nil {
			return nil, err
		}
	}
	num("cpus", c.CPUs, func(l sandbox.Limits) float64 { return l.CPUs })
	num("pids", float64(c.Pids), func(l sandbox.Limits) float64 { return float64(l.Pids) })
	num("open_files", float64(c.OpenFiles), func(l sandbox.Limits) float64 { return float64(l.OpenFiles) })
	return out, nil
}
