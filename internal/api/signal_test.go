package api

import (
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestParseSignalTakesEverySignal: the API takes every signal by name,
// short name or number, as MCP and the CLI do (once only thirteen names).
func TestParseSignalTakesEverySignal(t *testing.T) {
	for n := syscall.Signal(1); n <= 31; n++ {
		name := sandbox.SignalName(n)
		for _, in := range []string{name, name[3:]} {
			got, err := parseSignal(in)
			if err != nil || got != n {
				t.Errorf("parseSignal(%q) = %v, %v: want %v", in, got, err, n)
			}
		}
	}
	if _, err := parseSignal("NOPE"); err == nil {
		t.Error(`parseSignal("NOPE") succeeded`)
	}
}
