package testcap

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// fakeTB records Skipf and Fatalf instead of stopping the test. Methods it
// does not override panic (the embedded TB is nil), so the code under test
// can use nothing else.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = true
	f.msg = fmt.Sprintf(format, args...)
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

// fakeProbe says root works and kvm does not, and counts its calls.
type fakeProbe struct{ calls atomic.Int64 }

func (p *fakeProbe) probe(_ context.Context, name string) hostcap.Result {
	p.calls.Add(1)
	if name == "root" {
		return hostcap.Result{Name: name, OK: true, Detail: "euid 0"}
	}
	return hostcap.Result{Name: name, Why: name + " is missing here", Fix: "install " + name}
}

func TestRequire(t *testing.T) {
	tests := []struct {
		name       string
		env        string
		caps       []string
		wantSkip   bool
		wantFail   bool
		wantInMsg  []string
		wantProbed bool // whether probing happens at all
	}{
		{name: "working capability", caps: []string{"root"}, wantProbed: true},
		{name: "no capabilities asked", caps: nil},
		{
			name: "missing capability skips", caps: []string{"kvm"}, wantSkip: true, wantProbed: true,
			wantInMsg: []string{"kvm is missing here", "fix: install kvm"},
		},
		{
			name: "required missing capability fails", env: "kvm", caps: []string{"kvm"}, wantFail: true, wantProbed: true,
			wantInMsg: []string{"AIRLOCK_TEST_REQUIRE", "kvm is missing here", "fix: install kvm"},
		},
		{
			name: "spaces and empty entries", env: " root , kvm ,,", caps: []string{"kvm"}, wantFail: true, wantProbed: true,
			wantInMsg: []string{"kvm is missing here"},
		},
		{
			name: "another capability required", env: "root,qemu", caps: []string{"kvm"}, wantSkip: true, wantProbed: true,
			wantInMsg: []string{"kvm is missing here"},
		},
		{
			name: "one of several missing and required", env: "docker", caps: []string{"root", "kvm", "docker"}, wantFail: true, wantProbed: true,
			wantInMsg: []string{"docker is missing here"},
		},
		{name: "required and working", env: "root", caps: []string{"root"}, wantProbed: true},
		{
			name: "all is refused", env: "all", caps: []string{"root"}, wantFail: true,
			wantInMsg: []string{`"all" is not accepted`},
		},
		{
			name: "unknown name in the variable fails", env: "root,landlok", caps: []string{"root"}, wantFail: true,
			wantInMsg: []string{`unknown capability "landlok"`},
		},
		{
			name: "unknown name asked for fails", caps: []string{"warp"}, wantFail: true,
			wantInMsg: []string{`unknown capability "warp"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequire, tt.env)
			p := &fakeProbe{}
			c := newChecker(p.probe)
			tb := &fakeTB{}
			c.require(tb, tt.caps...)
			if tb.skipped != tt.wantSkip || tb.failed != tt.wantFail {
				t.Fatalf("skipped=%v failed=%v (%q), want skipped=%v failed=%v", tb.skipped, tb.failed, tb.msg, tt.wantSkip, tt.wantFail)
			}
			for _, s := range tt.wantInMsg {
				if !strings.Contains(tb.msg, s) {
					t.Errorf("message %q does not contain %q", tb.msg, s)
				}
			}
			if got := p.calls.Load() > 0; got != tt.wantProbed {
				t.Errorf("probed = %v, want %v", got, tt.wantProbed)
			}
		})
	}
}

func TestRequireProbesOnce(t *testing.T) {
	t.Setenv(EnvRequire, "")
	p := &fakeProbe{}
	c := newChecker(p.probe)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			c.require(&fakeTB{}, "kvm", "root")
		})
	}
	wg.Wait()
	c.require(&fakeTB{}, "kvm")
	if got := p.calls.Load(); got != 2 {
		t.Fatalf("probe ran %d times for 2 capabilities, want 2", got)
	}
}

func TestSkipOrFail(t *testing.T) {
	tests := []struct {
		name      string
		env       string
		cap       string
		wantSkip  bool
		wantFail  bool
		wantInMsg string
	}{
		{name: "not required skips", env: "", cap: "runsc", wantSkip: true, wantInMsg: "runsc: no sandbox: boom"},
		{name: "required fails", env: "landlock,runsc", cap: "runsc", wantFail: true, wantInMsg: "no sandbox: boom"},
		{name: "other required skips", env: "landlock", cap: "runsc", wantSkip: true, wantInMsg: "no sandbox: boom"},
		{name: "unknown capability fails", env: "", cap: "runc", wantFail: true, wantInMsg: `unknown capability "runc"`},
		{name: "all is refused", env: "all", cap: "runsc", wantFail: true, wantInMsg: `"all" is not accepted`},
		{name: "typo in the variable fails", env: "rnsc", cap: "runsc", wantFail: true, wantInMsg: `unknown capability "rnsc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequire, tt.env)
			tb := &fakeTB{}
			SkipOrFail(tb, tt.cap, "no sandbox: %s", "boom")
			if tb.skipped != tt.wantSkip || tb.failed != tt.wantFail {
				t.Fatalf("skipped=%v failed=%v (%q), want skipped=%v failed=%v", tb.skipped, tb.failed, tb.msg, tt.wantSkip, tt.wantFail)
			}
			if !strings.Contains(tb.msg, tt.wantInMsg) {
				t.Errorf("message %q does not contain %q", tb.msg, tt.wantInMsg)
			}
		})
	}
}

// TestRequireOnThisHost runs the real probes: root is a capability whose
// truth the test can check itself.
func TestRequireOnThisHost(t *testing.T) {
	t.Setenv(EnvRequire, "")
	tb := &fakeTB{}
	Require(tb, "root")
	root := os.Geteuid() == 0
	if tb.skipped == root || tb.failed {
		t.Fatalf("Require(root) skipped=%v failed=%v (%q) where root works=%v", tb.skipped, tb.failed, tb.msg, root)
	}
}

// TestCINamesKnown: every capability CI requires (.ci/run) is a name
// AIRLOCK_TEST_REQUIRE accepts, so none of them can turn into a skip.
func TestCINamesKnown(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	_, v, found := strings.Cut(string(b), EnvRequire+"=")
	if !found {
		t.Fatalf(".ci/run sets no %s", EnvRequire)
	}
	v, _, _ = strings.Cut(v, " ")
	names, err := parseRequired(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 16 {
		t.Fatalf("read %d names from .ci/run (%q), want them all", len(names), v)
	}
}
