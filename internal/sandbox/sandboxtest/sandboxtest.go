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
// that the same sandbox still runs `echo ok` afterwards, closes it, and asks
// the driver's Leaks check whether anything of it is left on the host.
// Cases run one after another: resource limits are flaky under contention.
//
// A driver that cannot do what a case checks declares it in
// Options.Unsupported; the suite then skips the case with that reason. A
// driver never passes a case silently.
//
// The cases' workloads use the tools of a Debian-like root: sh, coreutils,
// ps, find, dd, yes, unshare, hostname and python3.
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
}

// need is something a case needs from the driver beyond a sandbox.
type need int

const (
	needEgress need = iota + 1 // Options.Egress
	needFreeze                 // Options.FreezeAgent
)

// missing says what of needs the options lack, or "".
func (o Options) missing(needs []need) string {
	for _, n := range needs {
		switch {
		case n == needEgress && o.Egress == nil:
			return "Options.Egress (how to make a driver that reaches a given egress proxy)"
		case n == needFreeze && o.FreezeAgent == nil:
			return "Options.FreezeAgent (how to stop a sandbox's agent)"
		}
	}
	return ""
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
	// needs lists what the case needs from Options; a driver that does
	// not give it must declare the case Unsupported.
	needs []need
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
		{"file_escapes", fileEscapeCases()},
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
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if why, ok := opts.Unsupported[g.name+"/"+c.name]; ok {
						t.Skipf("the driver does not support this: %s", why)
					}
					if m := opts.missing(c.needs); m != "" {
						t.Fatalf("this case needs %s, which the driver's test does not give: give it, or declare the case in Options.Unsupported with the reason", m)
					}
					if slices.Contains(c.needs, needEgress) {
						ee := startEgress(t)
						runCase(t, opts.Egress(t, ee.proxy), opts, c, ee)
						return
					}
					runCase(t, newDriver(t), opts, c, nil)
				})
			}
		})
	}
}

// runCase makes the case's sandbox, runs the case, then checks that the
// sandbox still works, closes it and checks for leaks.
func runCase(t *testing.T, d sandbox.Driver, opts Options, c testCase, ee *egressEnv) {
	spec := sandbox.Spec{Limits: smallLimits}
	if ee != nil {
		spec.Network = ee.network()
	}
	if c.spec != nil {
		c.spec(t, &spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	start := time.Now()
	sb, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create a sandbox with %s: %v", d.Name(), err)
	}
	id := sb.ID()
	if took := time.Since(start); took > slow {
		t.Logf("creating sandbox %s took %v", id, took)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		start := time.Now()
		if err := sb.Close(cctx); err != nil {
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
		if opts.Leaks != nil {
			opts.Leaks(t, id)
		}
	})
	e := &env{ctx: ctx, sb: sb, driver: d, spec: spec, opts: opts, egress: ee}
	if !c.closes {
		// Cleanups run last-in first-out: this runs before the close
		// above, even when the case stopped with t.Fatal.
		t.Cleanup(func() { e.stillWorks(t) })
	}
	c.run(t, e)
}

// env is what a case works with.
type env struct {
	ctx    context.Context
	sb     sandbox.Instance
	driver sandbox.Driver
	spec   sandbox.Spec
	opts   Options
	// egress is the proxy and servers of an egress case; nil otherwise.
	egress *egressEnv
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

// run executes req, capturing its output unless req has writers of its own.
// An error from Exec fails the test.
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
	res, err := sandbox.Run(ctx, e.sb, sandbox.ExecRequest{Argv: []string{"echo", "ok"}, Stdout: &out})
	if err != nil {
		t.Errorf("afterwards, the same sandbox cannot run echo ok: %v", err)
		return
	}
	if res.ExitCode != 0 || res.Reason != sandbox.ReasonExit || out.String() != "ok\n" {
		t.Errorf("afterwards, the same sandbox does not run echo ok normally: result %s, stdout %q", describe(res), out.String())
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
