package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/hosttasks"
)

func TestTaskGuardNamesPidMax(t *testing.T) {
	g := newTaskGuard()
	n := g.host.Count()
	if n < 2 {
		t.Fatalf("host.Count() = %d; this test alone runs more threads than that", n)
	}
	limit, _ := g.host.Limit()
	if limit < n {
		t.Fatalf("the host's task limit read as %d, below the %d tasks running", limit, n)
	}
	if why := g.check(0); why != "" && n+int(g.perSandbox)+hosttasks.Reserve <= limit {
		t.Fatalf("check with room left: %q", why)
	}
	dir := t.TempDir()
	pidMax := filepath.Join(dir, "pid_max")
	if err := os.WriteFile(pidMax, []byte(strconv.Itoa(n)), 0o600); err != nil {
		t.Fatal(err)
	}
	if f := g.forecast(1); f != "" && n+tasksAtRest+hosttasks.Reserve <= limit {
		t.Fatalf("forecast of one sandbox with room left: %q", f)
	}
	g.host.PidMax, g.host.ThreadsMax = pidMax, pidMax // no room at all
	if f := g.forecast(5000); !strings.Contains(f, "the test will stop near 0") || !strings.Contains(f, "kernel.pid_max") {
		t.Fatalf("forecast without room = %q; want where it stops and the limit named", f)
	}
	why := g.check(7)
	if !strings.Contains(why, "stopped at 7 sandboxes") || !strings.Contains(why, "kernel.pid_max") || !strings.Contains(why, "sysctl -w") {
		t.Fatalf("check without room = %q; want it to stop and name kernel.pid_max and its fix", why)
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
