package drivertest

import (
	"os"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestProcs(t *testing.T) {
	ps := Procs()
	i := slices.IndexFunc(ps, func(p Proc) bool { return p.PID == os.Getpid() })
	if i < 0 {
		t.Skipf("this process is not in /proc here (%d processes listed)", len(ps))
	}
	self := ps[i]
	if len(self.UIDs) != 4 || self.UIDs[0] != os.Getuid() || self.Name == "" || self.State == "" || self.Cmdline[0] != os.Args[0] {
		t.Errorf("this process as Procs sees it: %+v", self)
	}
}

func TestSandboxCgroup(t *testing.T) {
	id := sandbox.NewID()
	for _, tt := range []struct{ cgroup, want string }{
		{"4:memory:/airlock/" + id + "\n0::/x\n", "4:memory:/airlock/" + id},
		{"4:pids:/airlock/" + id + "/workload/e1\n", "4:pids:/airlock/" + id + "/workload/e1"},
		{"4:pids:/airlock/" + id + "x\n0::/airlock/other/" + id + "y\n", ""},
		{"", ""},
	} {
		if got := (Proc{Cgroup: tt.cgroup}).SandboxCgroup(id); got != tt.want {
			t.Errorf("SandboxCgroup of %q = %q, want %q", tt.cgroup, got, tt.want)
		}
	}
}

// TestHostLeaks: a sandbox that never was leaves nothing.
func TestHostLeaks(t *testing.T) {
	if found := HostLeaks(sandbox.NewID()); len(found) != 0 {
		t.Errorf("a sandbox that never was left %q", found)
	}
}
