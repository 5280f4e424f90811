// Package testcap lets tests depend on host capabilities without passing
// silently where a capability is missing.
//
// A test that needs a capability calls Require. When the capability works,
// the test goes on. When it does not, the test is skipped with the probe's
// reason and fix, unless the environment variable AIRLOCK_TEST_REQUIRE
// names the capability: then the test fails, so that CI cannot pass by
// skipping what its machine is meant to have.
//
//	func TestJail(t *testing.T) {
//		testcap.Require(t, "root", "userns", "cgroupv1")
//		// … runs only where the jail really works.
//	}
//
// and in CI:
//
//	AIRLOCK_TEST_REQUIRE=root,userns,cgroupv1,seccomp,landlock go test ./...
//
// The variable takes the names in Names (hostcap's and the test rigs'),
// separated by commas.
// "all" is not accepted, and an unknown name fails every test that asks,
// so a typo cannot turn a requirement off.
//
// Each capability is probed at most once per test binary.
package testcap

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// EnvRequire names the environment variable that lists the capabilities a
// test must not skip for.
const EnvRequire = "AIRLOCK_TEST_REQUIRE"

// probeTimeout bounds one probe; hostcap's own timeouts are shorter.
const probeTimeout = 2 * time.Minute

// checker probes capabilities and remembers the results.
type checker struct {
	probe func(ctx context.Context, name string) hostcap.Result

	mu      sync.Mutex
	results map[string]*cached
}

// cached is one capability's result, probed once.
type cached struct {
	once sync.Once
	r    hostcap.Result
}

func newChecker(probe func(ctx context.Context, name string) hostcap.Result) *checker {
	return &checker{probe: probe, results: map[string]*cached{}}
}

// std is the checker of this test binary.
var std = newChecker(Probe)

// result probes name once and returns the remembered result afterwards.
func (c *checker) result(name string) hostcap.Result {
	c.mu.Lock()
	e, ok := c.results[name]
	if !ok {
		e = &cached{}
		c.results[name] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		e.r = c.probe(ctx, name)
	})
	return e.r
}

// Require skips the test unless every named capability works here; it fails
// the test instead when AIRLOCK_TEST_REQUIRE names a missing one. Names are
// those of Names; an unknown name fails the test.
func Require(t testing.TB, names ...string) {
	t.Helper()
	std.require(t, names...)
}

func (c *checker) require(t testing.TB, names ...string) {
	t.Helper()
	required, err := parseRequired(os.Getenv(EnvRequire))
	if err != nil {
		t.Fatalf("%v", err)
		return
	}
	for _, n := range names {
		if !Known(n) {
			t.Fatalf("testcap.Require: unknown capability %q (known: %s)", n, strings.Join(Names, ", "))
			return
		}
	}
	var missingMsgs, requiredMsgs []string
	for _, n := range names {
		r := c.result(n)
		if r.OK {
			continue
		}
		msg := fmt.Sprintf("%s: %s", n, r.Why)
		if r.Fix != "" {
			msg += " (fix: " + r.Fix + ")"
		}
		missingMsgs = append(missingMsgs, msg)
		if slices.Contains(required, n) {
			requiredMsgs = append(requiredMsgs, msg)
		}
	}
	switch {
	case len(requiredMsgs) > 0:
		t.Fatalf("%s requires capabilities that do not work here:\n%s", EnvRequire, strings.Join(requiredMsgs, "\n"))
	case len(missingMsgs) > 0:
		t.Skipf("missing capabilities:\n%s", strings.Join(missingMsgs, "\n"))
	}
}

// SkipOrFail is for a test that found a capability missing by itself: it
// fails the test with the message when AIRLOCK_TEST_REQUIRE names the
// capability, and skips it with the message otherwise.
//
//	if err := cmd.Run(); err != nil {
//		testcap.SkipOrFail(t, "runsc", "runsc cannot run a sandbox here: %v", err)
//	}
func SkipOrFail(t testing.TB, name, format string, args ...any) {
	t.Helper()
	required, err := parseRequired(os.Getenv(EnvRequire))
	if err != nil {
		t.Fatalf("%v", err)
		return
	}
	if !Known(name) {
		t.Fatalf("testcap.SkipOrFail: unknown capability %q (known: %s)", name, strings.Join(Names, ", "))
		return
	}
	msg := fmt.Sprintf(format, args...)
	if slices.Contains(required, name) {
		t.Fatalf("%s names %s: %s", EnvRequire, name, msg)
		return
	}
	t.Skipf("%s: %s", name, msg)
}

// parseRequired splits the value of AIRLOCK_TEST_REQUIRE, rejecting "all"
// and unknown names.
func parseRequired(v string) ([]string, error) {
	var names []string
	for _, f := range strings.Split(v, ",") {
		n := strings.TrimSpace(f)
		switch {
		case n == "":
			continue
		case n == "all":
			return nil, fmt.Errorf("%s=%q: \"all\" is not accepted; name the capabilities this machine must have (known: %s)",
				EnvRequire, v, strings.Join(Names, ","))
		case !Known(n):
			return nil, fmt.Errorf("%s=%q: unknown capability %q (known: %s)",
				EnvRequire, v, n, strings.Join(Names, ","))
		}
		names = append(names, n)
	}
	return names, nil
}
