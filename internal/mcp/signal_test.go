package mcp

import (
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestParseSignalTakesWhatTheAPITakes: process_kill takes every signal the
// API takes (once only nine names), by name, short name or number.
func TestParseSignalTakesWhatTheAPITakes(t *testing.T) {
	for n := syscall.Signal(1); n <= 31; n++ {
		name := sandbox.SignalName(n)
		for _, in := range []string{name, name[3:]} {
			got, err := parseSignal(in)
			if err != nil || got != n {
				t.Errorf("parseSignal(%q) = %v, %v: want %v", in, got, err, n)
			}
		}
	}
	if got, err := parseSignal(""); err != nil || got != syscall.SIGKILL {
		t.Errorf(`parseSignal("") = %v, %v: want SIGKILL`, got, err)
	}
	if _, err := parseSignal("NOPE"); err == nil {
		t.Error(`parseSignal("NOPE") succeeded`)
	}
}
