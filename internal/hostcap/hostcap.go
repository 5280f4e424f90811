// Package hostcap checks which isolation capabilities really work on this
// host.
//
// Each probe exercises the capability instead of looking for a file: the
// userns probe starts a child in new namespaces, the cgroup probes create a
// cgroup and write a limit, the runsc probe runs a sandbox, the kvm probe
// runs a guest. Every probe is bounded by a timeout and says, when the
// capability is missing, why and how to get it.
//
//	for _, r := range hostcap.All(ctx) {
//		fmt.Println(r.Name, r.OK, r.Detail, r.Why, r.Fix)
//	}
package hostcap

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Result is the outcome of one probe.
type Result struct {
	// Name is the capability, one of Names.
	Name string `json:"name"`
	// OK says that the capability works here.
	OK bool `json:"ok"`
	// Detail says what was found, such as a version ("ABI 7").
	Detail string `json:"detail,omitempty"`
	// Why says, when not OK, what is missing or failed.
	Why string `json:"why,omitempty"`
	// Fix is, when not OK, a command or step that provides the capability.
	Fix string `json:"fix,omitempty"`
}

// Names lists every capability a probe exists for, in a stable order: the
// kernel's isolation layers and the programs the drivers run. `airlock
// doctor` reports them; AIRLOCK_TEST_REQUIRE accepts them and the test
// rigs' names (testcap.Names).
var Names = []string{
	"root",
	"userns",
	"cgroupv1",
	"cgroupv2",
	"seccomp",
	"landlock",
	"runsc",
	"kvm",
	"qemu",
	"bwrap",
	"overlay", // overlayfs mounts made by root, for copy-on-write mounts (internal/cow)
}

// probe checks one capability. It returns a Result without Name; Probe
// fills it in.
type probe struct {
	run     func(ctx context.Context) Result
	timeout time.Duration
}

// defaultTimeout bounds a probe that sets no timeout of its own.
const defaultTimeout = 10 * time.Second

// maxParallel bounds how many probes All runs at once.
const maxParallel = 4

// Probe checks the named capability, within ctx and the probe's own timeout.
// An unknown name gives a Result that is not OK.
func Probe(ctx context.Context, name string) Result {
	p, ok := probes[name]
	if !ok {
		return Result{Name: name, Why: fmt.Sprintf("unknown capability %q (known: %v)", name, Names)}
	}
	timeout := p.timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	return Run(ctx, name, timeout, p.run)
}

// Run runs one probe named name within timeout and tidies its Result: a
// failure always says why, a success carries no why or fix. The tests'
// own probes (internal/testcap) go through it too.
func Run(ctx context.Context, name string, timeout time.Duration, probe func(context.Context) Result) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := probe(ctx)
	r.Name = name
	if !r.OK && r.Why == "" {
		r.Why = "probe failed without saying why"
	}
	if r.OK {
		r.Why, r.Fix = "", ""
	}
	return r
}

// All runs every probe, a few at a time, and returns the results in the
// order of Names.
func All(ctx context.Context) []Result {
	results := make([]Result, len(Names))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	// Start the slowest probes first so that they overlap the fast ones.
	order := slices.Clone(Names)
	slices.SortStableFunc(order, func(a, b string) int {
		return cmp.Compare(probes[b].timeout, probes[a].timeout)
	})
	for _, name := range order {
		i := slices.Index(Names, name)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = Probe(ctx, name)
		})
	}
	wg.Wait()
	return results
}

// Known says whether name is one of Names.
func Known(name string) bool {
	return slices.Contains(Names, name)
}
