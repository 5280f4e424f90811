// Package sandboxtest is the conformance and attack suite every driver runs.
//
// A driver's test calls Run with a function that makes its driver:
//
//	func TestConformance(t *testing.T) {
//		testcap.Require(t, "root", "userns", "cgroupv1")
//		sandboxtest.Run(t, func(t *testing.T) sandbox.Driver { … }, sandboxtest.Options{
//			Unsupported: map[string]string{"limits/cpu_time": "this backend has no CPU-time accounting"},
//			Leaks:       checkLeaks,
//		})
//	}
//
// Every case makes its own small sandbox, checks real behaviour from the
// outside and from the inside (a hostile workload trying to escape), checks
// that the same sandbox still runs a command afterwards, closes it, and asks
// the driver's Leaks check whether anything of it is left on the host.
// Cases run one after another unless Options.Parallel says otherwise; the
// cases that assert a duration, a rate or CPU use, or that count a
// host-wide resource, always check with nothing beside them.
//
// What a case needs of the driver beyond running a command (a shell, the
// file API, background processes, egress, host mounts) it reads from the
// driver's Capabilities. A driver that cannot do what a case checks, or
// lacks what it needs, declares the case in Options.Unsupported with the
// reason; the suite then skips it. A case whose need the driver lacks and
// does not declare fails: a driver never passes a case silently.
//
// What the cases run inside goes through a Workload. The cases about exec,
// exit codes, streams, stdin, the environment, the file API and its escapes,
// memory, timeouts, output limits, the network and host files need nothing
// else, so a driver without a shell runs them with a workload of its own.
// The rest (processes, signals, mounts, posture) need Capabilities.Shell:
// they use the tools of a Debian-like root, sh, coreutils, ps, find, dd,
// unshare, hostname and python3, as ShellWorkload does.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Options say what a driver cannot do and how to check it cleaned up.
type Options struct {
	// Unsupported maps a case name (see Cases, e.g. "limits/cpu_time") to
	// why the driver does not support it; the suite skips that case with
	// the reason. A name that is not a case fails the suite. Nil means the
	// driver supports every case.
	Unsupported map[string]string
	// Leaks, when set, is called after each sandbox has been closed and
	// checks that nothing of it (processes, cgroups, mounts, locks) remains
	// on the host. Nil means no leak check.
	Leaks func(t *testing.T, sandboxID string)
	// Egress makes a driver whose sandboxes in network mode egress reach
	// proxy. Nil: the egress cases must be declared Unsupported.
	Egress func(t *testing.T, proxy *egress.Proxy) sandbox.Driver
	// FreezeAgent stops sb's agent so that it answers nothing (SIGSTOP, a
	// cgroup freezer) and returns what lets it go on; the thaw must be
	// harmless once the sandbox is closed. Nil: the frozen-agent cases must
	// be declared Unsupported.
	FreezeAgent func(t *testing.T, sb sandbox.Instance) (thaw func())
	// KillAgent kills sb's agent at once (SIGKILL; where the agent cannot
	// be reached alone, the runtime that holds it). Nil: the cases that
	// kill it must be declared Unsupported.
	KillAgent func(t *testing.T, sb sandbox.Instance)
	// Workload is what the cases run inside the sandbox. Nil means
	// ShellWorkload, which needs Capabilities.Shell: a driver without a
	// shell gives its own.
	Workload Workload
	// Parallel is how many cases of a group run at a time; 0 and 1 mean
	// one after another. A driver whose cases wait on a cluster or a
	// virtual machine more than on this machine's CPU sets it (its test
	// says why that many). A case marked alone (it asserts a duration, a
	// rate or CPU use, or counts a host-wide resource) has nothing beside
	// it from its sandbox's create to the end of its check: it waits until
	// no other case is at any step, and the others wait for it; its close
	// runs beside the other cases'.
	Parallel int
	// Settle, when set with Parallel above 1, lets an alone case make its
	// sandbox beside other cases (not beside another alone case's check)
	// and hold the quiet from then on: once the others have stepped aside,
	// Settle waits until what they left behind has settled on the host
	// (Pods deleted, their containers stopped), and the check starts. Nil:
	// the alone case makes its sandbox inside the quiet, whose create gives
	// the host that time.
	Settle func(t *testing.T)
}

// need is something a case needs from the driver beyond running a command.
type need int

const (
	needShell      need = iota + 1 // Capabilities.Shell
	needFiles                      // Capabilities.Files
	needBackground                 // Capabilities.Background
	needEgress                     // Capabilities.Egress and Options.Egress
	needHostMounts                 // Capabilities.HostMounts
	needHostRoot                   // Capabilities.HostRoot
	needFreeze                     // Options.FreezeAgent
	needPTY                        // Capabilities.PTY
	// needRestart is Capabilities.SurvivesRestart; a driver that does
	// not declare it skips the case (restart/refused checks the
	// declaration).
	needRestart
	// needNoRestart is the opposite: a driver that declares
	// SurvivesRestart skips the case (restart/reattach checks that).
	needNoRestart
	needSnapshots // Capabilities.Snapshots
	needKill      // Options.KillAgent
	needCowMounts // Capabilities.CowMounts
	needHome      // Capabilities.Home
)

// missing says which of needs the driver's capabilities or the options
// lack, or "" when none. A lacking capability comes first: it is the
// driver's to declare, an option the test's to give.
func missing(caps sandbox.Capabilities, o Options, needs []need) (what string, capability bool) {
	for _, n := range needs {
		switch {
		case n == needShell && !caps.Shell:
			return "Capabilities.Shell (a Linux userland with sh and the usual tools)", true
		case n == needFiles && !caps.Files:
			return "Capabilities.Files (the file API)", true
		case n == needBackground && !caps.Background:
			return "Capabilities.Background (execs that run on in the background)", true
		case n == needEgress && !caps.Egress:
			return "Capabilities.Egress (network mode egress)", true
		case n == needHostMounts && !caps.HostMounts:
			return "Capabilities.HostMounts (host paths as mounts, and the root shown as it is)", true
		case n == needHostRoot && !caps.HostRoot:
			return "Capabilities.HostRoot (a host directory as the root)", true
		case n == needPTY && !caps.PTY:
			return "Capabilities.PTY (commands on a terminal: ExecRequest.PTY)", true
		case n == needCowMounts && !caps.CowMounts:
			return "Capabilities.CowMounts (copy-on-write mounts: Mount.Cow)", true
		case n == needHome && !caps.Home:
			return "Capabilities.Home (Spec.Home: /workspace bound at /home/NAME)", true
		case n == needSnapshots && !caps.Snapshots:
			return "Capabilities.Snapshots (sandbox.Snapshotter: capture and restore the workspace)", true
		}
	}
	for _, n := range needs {
		switch {
		case n == needEgress && o.Egress == nil:
			return "Options.Egress (how to make a driver that reaches a given egress proxy)", false
		case n == needFreeze && o.FreezeAgent == nil:
			return "Options.FreezeAgent (how to stop a sandbox's agent)", false
		case n == needKill && o.KillAgent == nil:
			return "Options.KillAgent (how to kill a sandbox's agent)", false
		}
	}
	return "", false
}

// smallLimits are the limits of a case's sandbox unless the case changes
// them: small, so that limit cases run fast.
var smallLimits = sandbox.Limits{
	MemoryBytes: 128 << 20,
	CPUs:        1,
	Pids:        64,
	Timeout:     3 * time.Second,
	Lifetime:    2 * time.Minute,
	DiskBytes:   32 << 20,
	TmpBytes:    16 << 20,
	OutputBytes: 1 << 20,
	OpenFiles:   256,
}

// caseTimeout bounds all of one case's calls.
const caseTimeout = 60 * time.Second

// slow is how long creating or closing a sandbox may take before the suite
// logs it.
const slow = 2 * time.Second

// testCase is one case of the suite.
type testCase struct {
	name string
	// spec adjusts the case's sandbox spec before the sandbox is made; nil
	// keeps the small defaults.
	spec func(t *testing.T, s *sandbox.Spec)
	// closes says the case closes the sandbox itself, so the suite does not
	// check that it still works afterwards.
	closes bool
	// own says the case makes its own sandboxes (env.create); the suite
	// makes none, and env.sb is nil.
	own bool
	// needs lists what the case needs of the driver and of Options; a
	// driver that lacks one must declare the case Unsupported.
	needs []need
	// alone says the case makes its sandbox and runs with no other case
	// beside it, whatever Options.Parallel says: it asserts a duration, a rate
	// or CPU use (other sandboxes' work would slow what it measures), or
	// counts a host-wide resource that other cases use too. docs/tests.md
	// names the rule.
	alone bool
	run   func(t *testing.T, e *env)
}

// group is a set of cases that Run runs as one subtest.
type group struct {
	name  string
	cases []testCase
}

// groups lists every case, in the order they run.
func groups() []group {
	return []group{
		{"exec", execCases()},
		{"files", fileCases()},
		{"network", networkCases()},
		{"egress", egressCases()},
		{"limits", limitCases()},
		{"posture", postureCases()},
		{"pools", poolCases()},
		{"file_escapes", fileEscapeCases()},
		{"mounts", mountCases()},
		{"pty", ptyCases()},
		{"restart", restartCases()},
		{"snapshots", snapshotCases()},
		{"cow", cowCases()},
	}
}

// Cases returns the names of the suite's cases, "group/case", as
// Options.Unsupported and `go test -run` name them.
func Cases() []string {
	var names []string
	for _, g := range groups() {
		for _, c := range g.cases {
			names = append(names, g.name+"/"+c.name)
		}
	}
	return names
}

// Run runs every case against the driver that newDriver makes. newDriver is
// called once per case, with the case's t.
func Run(t *testing.T, newDriver func(t *testing.T) sandbox.Driver, opts Options) {
	t.Helper()
	names := Cases()
	for name := range opts.Unsupported {
		if !slices.Contains(names, name) {
			t.Errorf("Options.Unsupported names %q, which is not a case of the suite (cases: %s)", name, strings.Join(names, ", "))
		}
	}
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			runCases(t, g.cases, opts.Parallel, func(t *testing.T, c testCase, q *quiet) {
				if why, ok := opts.Unsupported[g.name+"/"+c.name]; ok {
					t.Skipf("the driver does not support this: %s", why)
				}
				e := newEnv(t, c, newDriver, opts)
				e.quiet = q
				runCase(t, e, c)
			})
		})
	}
}

// runCases runs each of cases as a subtest of t with one. With parallel
// above 1, they run up to parallel at a time, each in a goroutine of its
// own (t.Run from several goroutines; not t.Parallel, whose bound is the
// whole test binary's -parallel), in order of start, and one gets the
// quiet that lets an alone case's run have nothing beside it. Otherwise
// every case runs in order, one after another, and q is nil.
func runCases(t *testing.T, cases []testCase, parallel int, one func(t *testing.T, c testCase, q *quiet)) {
	if parallel <= 1 {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { one(t, c, nil) })
		}
		return
	}
	q := &quiet{}
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, c := range cases {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t.Run(c.name, func(t *testing.T) {
				q.enter(t)
				one(t, c, q)
			})
		})
	}
	wg.Wait()
}

// quiet is how the cases of a group that run side by side let an alone
// case measure with nothing beside it: every case holds it shared from
// its start to the end of its last cleanup, and an alone case holds it
// alone from its sandbox's create to the end of its check (its close and
// leak check are not what it measures, and run beside other cases').
// A nil quiet does nothing: the cases run one after another.
type quiet struct{ mu sync.RWMutex }

// enter holds q shared until t's cleanups have run.
func (q *quiet) enter(t *testing.T) {
	q.mu.RLock()
	t.Cleanup(q.mu.RUnlock)
}

// alone waits until no other case of the group holds q, holds it alone,
// and returns what gives it back shared, as enter left it.
func (q *quiet) alone() (done func()) {
	if q == nil {
		return func() {}
	}
	q.mu.RUnlock()
	q.mu.Lock()
	return func() {
		q.mu.Unlock()
		q.mu.RLock()
	}
}

// newEnv makes the driver of case c and checks that it, and opts, give
// what c needs; a case whose need is missing fails.
func newEnv(t *testing.T, c testCase, newDriver func(t *testing.T) sandbox.Driver, opts Options) *env {
	t.Helper()
	e := &env{opts: opts, newDriver: newDriver}
	if slices.Contains(c.needs, needEgress) && opts.Egress != nil {
		e.egress = startEgress(t)
		e.driver = opts.Egress(t, e.egress.proxy)
	} else {
		e.driver = newDriver(t)
	}
	e.caps = e.driver.Capabilities()
	if slices.Contains(c.needs, needRestart) && !e.caps.SurvivesRestart {
		t.Skip("the driver declares that its sandboxes do not survive a restart (restart/refused checks that)")
	}
	if slices.Contains(c.needs, needNoRestart) && e.caps.SurvivesRestart {
		t.Skip("the driver declares that its sandboxes survive a restart (restart/reattach checks that)")
	}
	if m, capability := missing(e.caps, opts, c.needs); capability {
		t.Fatalf("this case needs %s, which the %s driver does not declare: declare the case in Options.Unsupported with the reason", m, e.driver.Name())
	} else if m != "" {
		t.Fatalf("this case needs %s, which the driver's test does not give: give it, or declare the case in Options.Unsupported with the reason", m)
	}
	e.w = opts.Workload
	if e.w == nil {
		if !e.caps.Shell {
			t.Fatalf("the %s driver has no shell (Capabilities.Shell is false), so the default ShellWorkload cannot run in it: give Options.Workload", e.driver.Name())
		}
		e.w = ShellWorkload{}
	}
	return e
}

// runCase makes the case's sandbox, runs the case, then checks that the
// sandbox still works, closes it and checks for leaks.
func runCase(t *testing.T, e *env, c testCase) {
	// An alone case is alone to the end of its check; its close runs
	// beside others. It is alone from its sandbox's create, which gives
	// what other cases did just before (Pods deleted, machines stopped) a
	// few seconds to settle, unless Options.Settle waits for that instead:
	// then it makes its sandbox first, beside other cases.
	early := c.alone && !c.own && e.quiet != nil && e.opts.Settle != nil
	if c.alone && !early {
		defer e.quiet.alone()()
	}
	e.spec = sandbox.Spec{Limits: smallLimits}
	if e.egress != nil {
		e.spec.Network = e.egress.network()
	}
	if c.spec != nil {
		c.spec(t, &e.spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	e.ctx = ctx
	if !c.own {
		e.sb = e.create(t, e.spec)
		if !c.closes {
			// Cleanups run last-in first-out: this runs before the close
			// that create registered, even when the case stopped with
			// t.Fatal.
			t.Cleanup(func() { e.stillWorks(t) })
		}
	}
	if early {
		defer e.quiet.alone()()
		e.opts.Settle(t)
	}
	c.run(t, e)
}

// create makes a sandbox from spec with the case's driver, failing the test
// when it cannot. It is closed and checked for leaks when the test ends,
// unless close did that earlier.
func (e *env) create(t *testing.T, spec sandbox.Spec) sandbox.Instance {
	t.Helper()
	start := time.Now()
	sb, err := e.driver.Create(e.ctx, spec)
	if err != nil {
		t.Fatalf("create a sandbox with %s: %v", e.driver.Name(), err)
	}
	if took := time.Since(start); took > slow {
		t.Logf("creating sandbox %s took %v", sb.ID(), took)
	}
	t.Cleanup(func() { e.close(t, sb) })
	return sb
}

// close closes sb, checks that it says it is done, and checks for leaks;
// only the first call for a sandbox does anything.
func (e *env) close(t *testing.T, sb sandbox.Instance) {
	t.Helper()
	e.mu.Lock()
	if e.closed == nil {
		e.closed = map[string]bool{}
	}
	id := sb.ID()
	done := e.closed[id]
	e.closed[id] = true
	e.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := sb.Close(ctx); err != nil {
		t.Errorf("close sandbox %s: %v", id, err)
	}
	if took := time.Since(start); took > slow {
		t.Logf("closing sandbox %s took %v", id, took)
	}
	select {
	case <-sb.Done():
	default:
		t.Errorf("sandbox %s: Done is not closed after Close", id)
	}
	if e.opts.Leaks != nil {
		e.opts.Leaks(t, id)
	}
}

// env is what a case works with.
type env struct {
	ctx    context.Context
	sb     sandbox.Instance // nil in a case that makes its own
	driver sandbox.Driver
	// newDriver makes another driver value like driver (restart cases).
	newDriver func(t *testing.T) sandbox.Driver
	caps      sandbox.Capabilities
	w         Workload
	spec      sandbox.Spec
	opts      Options
	// egress is the proxy and servers of an egress case; nil otherwise.
	egress *egressEnv
	// quiet lets an alone case run with nothing beside it; nil when the
	// cases run one after another.
	quiet *quiet

	mu     sync.Mutex
	closed map[string]bool // sandboxes close has closed, by ID
}

// output is what one exec printed and how it ended.
type output struct {
	stdout, stderr string
	res            sandbox.Result
	wall           time.Duration
}

// String describes o for a failure message.
func (o output) String() string {
	return "result " + describe(o.res) + "\nstdout: " + clip(o.stdout) + "\nstderr: " + clip(o.stderr)
}

// run executes req in the case's sandbox, capturing its output unless req
// has writers of its own. An error from Run fails the test.
func (e *env) run(t *testing.T, req sandbox.ExecRequest) output {
	t.Helper()
	var out, errb syncBuffer
	if req.Stdout == nil {
		req.Stdout = &out
	}
	if req.Stderr == nil {
		req.Stderr = &errb
	}
	start := time.Now()
	res, err := sandbox.Run(e.ctx, e.sb, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Argv, err)
	}
	return output{stdout: out.String(), stderr: errb.String(), res: res, wall: time.Since(start)}
}

// runIn runs req in sb, its standard output to out, and fails the test
// unless it exits 0.
func (e *env) runIn(t *testing.T, sb sandbox.Instance, req sandbox.ExecRequest, out *syncBuffer) {
	t.Helper()
	req.Stdout = out
	res, err := sandbox.Run(e.ctx, sb, req)
	if err != nil || res.ExitCode != 0 || res.Reason != sandbox.ReasonExit {
		t.Fatalf("exec %q: %v, %s", req.Argv, err, describe(res))
	}
}

// ok runs req, requires that it exits 0, and returns its standard output.
func (e *env) ok(t *testing.T, req sandbox.ExecRequest) string {
	t.Helper()
	o := e.run(t, req)
	if o.res.ExitCode != 0 || o.res.Reason != sandbox.ReasonExit {
		t.Fatalf("%q: want exit 0, got %s", req.Argv, o)
	}
	return o.stdout
}

// sh runs script with sh -c.
func (e *env) sh(t *testing.T, script string) output {
	t.Helper()
	return e.run(t, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}})
}

// shOK runs script with sh -c, requires that it exits 0, and returns its
// standard output.
func (e *env) shOK(t *testing.T, script string) string {
	t.Helper()
	o := e.sh(t, script)
	if o.res.ExitCode != 0 || o.res.Reason != sandbox.ReasonExit {
		t.Fatalf("sh -c %q: want exit 0, got %s", script, o)
	}
	return o.stdout
}

// python runs a python3 program.
func (e *env) python(t *testing.T, program string) output {
	t.Helper()
	return e.run(t, sandbox.ExecRequest{Argv: []string{"python3", "-c", program}})
}

// pythonOK runs a python3 program, requires that it exits 0, and returns
// its standard output.
func (e *env) pythonOK(t *testing.T, program string) string {
	t.Helper()
	o := e.python(t, program)
	if o.res.ExitCode != 0 || o.res.Reason != sandbox.ReasonExit {
		t.Fatalf("python3 -c %q: want exit 0, got %s", program, o)
	}
	return o.stdout
}

// stillWorks checks that the sandbox still runs a command normally.
func (e *env) stillWorks(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out syncBuffer
	req := e.w.Print("ok\n", "", 0)
	req.Stdout = &out
	res, err := sandbox.Run(ctx, e.sb, req)
	if err != nil {
		t.Errorf("afterwards, the same sandbox cannot print ok: %v", err)
		return
	}
	if res.ExitCode != 0 || res.Reason != sandbox.ReasonExit || out.String() != "ok\n" {
		t.Errorf("afterwards, the same sandbox does not print ok normally: result %s, stdout %q", describe(res), out.String())
	}
}

// readFile reads the whole file at p through the file API.
func (e *env) readFile(p string) (string, error) {
	var b bytes.Buffer
	err := e.sb.Files().ReadFile(e.ctx, p, 0, 0, &b)
	return b.String(), err
}

// writeFile writes content to p through the file API, failing the test on
// an error.
func (e *env) writeFile(t *testing.T, p, content string, mode uint32) {
	t.Helper()
	if err := e.sb.Files().WriteFile(e.ctx, p, strings.NewReader(content), fs.FileMode(mode)); err != nil {
		t.Fatalf("WriteFile %s: %v", p, err)
	}
}

// expectExit checks that o ended by itself with code.
func expectExit(t *testing.T, what string, o output, code int) {
	t.Helper()
	if o.res.Reason != sandbox.ReasonExit || o.res.ExitCode != code || o.res.Signal != "" {
		t.Errorf("%s: want reason exit with code %d, got %s", what, code, o)
	}
}

// expectFail checks that o exited by itself with a non-zero code: the
// attempt it made was refused.
func expectFail(t *testing.T, what string, o output) {
	t.Helper()
	if o.res.ExitCode == 0 || o.res.Reason != sandbox.ReasonExit {
		t.Errorf("%s: want it to fail (non-zero exit, reason exit), got %s", what, o)
	}
}

// expectLimits checks the reason and that every limit in want was hit.
func expectLimits(t *testing.T, what string, o output, reason sandbox.Reason, want ...sandbox.Limit) {
	t.Helper()
	if o.res.Reason != reason {
		t.Errorf("%s: want reason %s, got %s", what, reason, o)
	}
	for _, l := range want {
		if !o.res.Hit(l) {
			t.Errorf("%s: want %s in LimitsHit, got %s", what, l, o)
		}
	}
}

// describe prints a Result on one line.
func describe(r sandbox.Result) string {
	var b strings.Builder
	b.WriteString("{exit ")
	b.WriteString(strconv.Itoa(r.ExitCode))
	if r.Signal != "" {
		b.WriteString(" signal " + r.Signal)
	}
	b.WriteString(" reason " + string(r.Reason))
	b.WriteString(" limits [")
	for i, l := range r.LimitsHit {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(l))
	}
	b.WriteString("]")
	if r.StdoutTruncated || r.StderrTruncated {
		b.WriteString(" truncated")
	}
	if r.Message != "" {
		b.WriteString(" message " + strconv.Quote(r.Message))
	}
	b.WriteString(" wall " + strconv.Itoa(int(r.Usage.WallMS)) + "ms}")
	return b.String()
}

// clip shortens s for a failure message.
func clip(s string) string {
	const n = 2000
	if len(s) > n {
		return strconv.Quote(s[:n]) + "…"
	}
	return strconv.Quote(s)
}

// randomToken returns a random string no file or process holds by chance.
func randomToken(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// syncBuffer is a buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// isClass reports whether err is one of the classes.
func isClass(err error, classes ...error) bool {
	for _, c := range classes {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// execArgv is a request that runs argv with everything else default.
func execArgv(argv ...string) sandbox.ExecRequest { return sandbox.ExecRequest{Argv: argv} }
