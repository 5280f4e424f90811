package contained

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestIsVMRuntime(t *testing.T) {
	for name, vm := range map[string]bool{
		"runc": false, "crun": false, "": false, "default": false,
		"runsc": true, "io.containerd.runsc.v1": true, "gvisor": true, "kata": true, "kata-qemu": true, "Kata-FC": true,
	} {
		if got := IsVMRuntime(name); got != vm {
			t.Errorf("IsVMRuntime(%q) = %v, want %v", name, got, vm)
		}
	}
	// A RuntimeClass is told by its name or its handler.
	if !IsVMRuntime("sandboxed", "runsc") {
		t.Error("a RuntimeClass whose handler is runsc")
	}
}

func TestOverheads(t *testing.T) {
	l := sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}
	if Memory(l, false) != l.MemoryBytes+AgentMemory || Memory(l, true) != l.MemoryBytes+KernelMemory {
		t.Errorf("memory %d %d", Memory(l, false), Memory(l, true))
	}
	if Pids(l, false) != 64+AgentPids || Pids(l, true) != 64*3+256 {
		t.Errorf("pids %d %d", Pids(l, false), Pids(l, true))
	}
	for _, vm := range []bool{false, true} {
		dt := OOMDeath(l, vm)
		if dt.Reason != sandbox.ReasonOOM || !strings.Contains(dt.Msg, "256 MiB") || !strings.Contains(dt.Msg, Holder(vm)) {
			t.Errorf("OOM death %+v", dt)
		}
	}
}
