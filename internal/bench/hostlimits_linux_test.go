package bench

import (
	"strings"
	"syscall"
	"testing"
)

func TestTaskGuardNamesPidMax(t *testing.T) {
	n := hostTasks()
	if n < 2 {
		t.Fatalf("hostTasks() = %d; this test alone runs more threads than that", n)
	}
	g := newTaskGuard()
	if g.pidMax < n {
		t.Fatalf("kernel.pid_max read as %d, below the %d tasks running", g.pidMax, n)
	}
	if why := g.check(0); why != "" && n+int(g.perSandbox)+taskReserve <= g.pidMax {
		t.Fatalf("check with room left: %q", why)
	}
	g.pidMax = n // no room at all
	why := g.check(7)
	if !strings.Contains(why, "stopped at 7 sandboxes") || !strings.Contains(why, "kernel.pid_max") {
		t.Fatalf("check without room = %q; want it to stop and name kernel.pid_max", why)
	}
}

func TestRaiseOpenFiles(t *testing.T) {
	var before syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &before); err != nil {
		t.Fatal(err)
	}
	if note := raiseOpenFiles(0); note != "" && before.Cur >= 1024 {
		t.Fatalf("raiseOpenFiles(0) changed a limit of %d: %q", before.Cur, note)
	}
	want := before.Cur + 100*fdsPerSandbox
	note := raiseOpenFiles(int(before.Cur/fdsPerSandbox) + 100)
	var after syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &after); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &before) }()
	switch {
	case after.Cur >= want && strings.Contains(note, "raised"):
	case after.Cur == before.Cur && strings.Contains(note, "ulimit -n"):
	default:
		t.Fatalf("limit %d -> %d, note %q: want it raised to %d and said so, or left and a fix named", before.Cur, after.Cur, note, want)
	}
}
