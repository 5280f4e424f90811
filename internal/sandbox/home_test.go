package sandbox_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"
)

func TestPolicyPath(t *testing.T) {
	for _, c := range sandboxtest.HomePaths {
		if got := sandbox.PolicyPath(c.Home, c.Path); got != c.Want {
			t.Errorf("PolicyPath(%q, %q) = %q; want %q", c.Home, c.Path, got, c.Want)
		}
	}
}
