package hosttasks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCheckAndExplain(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := Counter{PidMax: write("pid_max", "32768\n"), ThreadsMax: write("threads-max", "20000\n"), LoadAvg: write("loadavg", "0.5 0.4 0.3 2/1500 999\n")}
	if n, name := c.Limit(); n != 20000 || name != "kernel.threads-max" {
		t.Errorf("Limit() = %d, %q; want the lower, 20000 kernel.threads-max", n, name)
	}
	if n := c.Count(); n != 1500 {
		t.Errorf("Count() = %d, want 1500", n)
	}
	if err := c.Check(100); err != nil {
		t.Errorf("Check with room: %v", err)
	}
	write("loadavg", "0.5 0.4 0.3 2/19000 999\n")
	if err := c.Check(100); err == nil || !strings.Contains(err.Error(), "kernel.threads-max") {
		t.Errorf("Check near the limit: %v", err)
	}
	fork := fmt.Errorf("fork: %w", syscall.EAGAIN)
	if err := c.Explain(fork); !errors.Is(err, syscall.EAGAIN) || !strings.Contains(err.Error(), "19000 tasks") {
		t.Errorf("Explain near the limit: %v", err)
	}
	if err := c.Explain(syscall.ENOMEM); err != syscall.ENOMEM { //nolint:errorlint // the very error, unchanged
		t.Errorf("Explain(ENOMEM) = %v, want it unchanged", err)
	}
	write("loadavg", "0.5 0.4 0.3 2/1500 999\n")
	if err := c.Explain(fork); err != fork { //nolint:errorlint // the very error, unchanged
		t.Errorf("Explain far from the limit = %v, want it unchanged", err)
	}
	if err := (Counter{PidMax: "/nonexistent", ThreadsMax: "/nonexistent", LoadAvg: "/nonexistent"}).Check(1 << 30); err != nil {
		t.Errorf("Check without the files: %v", err)
	}
}
