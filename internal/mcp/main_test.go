package mcp_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
)

// TestMain builds the in-sandbox agent for the tests that run real
// sandboxes.
func TestMain(m *testing.M) { agenttest.Main(m) }
