package microvm

import "testing"

func TestTSCKHz(t *testing.T) {
	k := tscKHz()
	t.Logf("host TSC: %d kHz", k)
	if k < 100_000 || k > 10_000_000 {
		t.Fatalf("host TSC at %d kHz: not a plausible CPU clock", k)
	}
}
